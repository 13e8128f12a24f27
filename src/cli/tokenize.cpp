// `tern tokenize -m MODEL -p TEXT` prints the token ids separated by single spaces on one line;
// `tern detokenize -m MODEL --tokens 1,2,3` prints the text. Contracts outside checks rely on. Only the GGUF
// metadata is read (no weights).
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "runtime/engine.h"
#include "text/gguf_vocab.h"

namespace tern::cli {

static text::Tokenizer load_tokenizer(const std::string& path) {
  gguf::File f = gguf::File::open(path);
  return text::Tokenizer(text::tokenizer_data_from_gguf(f));
}

static RunFn setup_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, prompt;
    bool parse_special = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "Model file (GGUF)")->required();
  app.add_option("-p,--prompt", o->prompt, "Text to tokenize")->required();
  app.add_flag("--parse-special", o->parse_special, "Recognize special-token text (<|im_start|>) as special tokens");
  return [o] {
    text::Tokenizer tok = load_tokenizer(o->model);
    std::vector<int32_t> ids = tok.encode(o->prompt, o->parse_special);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
  };
}

static RunFn setup_detokenize(CLI::App& app) {
  struct Opts {
    std::string model, tokens;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "Model file (GGUF)")->required();
  app.add_option("--tokens", o->tokens, "Token ids, comma separated")->required();
  return [o] {
    text::Tokenizer tok = load_tokenizer(o->model);
    std::vector<int32_t> ids = runtime::parse_token_list(o->tokens);
    std::string s = tok.decode(ids);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  };
}

TERN_COMMAND(tokenize, "tokenize", "Print the token ids of a text", setup_tokenize);
TERN_COMMAND(detokenize, "detokenize", "Print the text of token ids", setup_detokenize);

}  // namespace tern::cli
