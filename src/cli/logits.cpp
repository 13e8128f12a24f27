// `tern logits -m MODEL --tokens 1,2,3 -o FILE`: teacher-forced logits, little-endian float32, n_tokens rows of
// n_vocab (row i: the logits after token i). Writes nothing else. A contract outside checks rely on.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/model_options.h"
#include "core/error.h"

namespace tern::cli {

static RunFn setup_logits(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    std::string tokens, out;
  };
  auto o = std::make_shared<Opts>();
  add_engine_options(app, o->engine);
  app.add_option("--tokens", o->tokens, "Token ids, comma separated")->required();
  app.add_option("-o,--output", o->out, "Output file (float32 [n_tokens, n_vocab])")->required();
  return [o] {
    std::vector<int32_t> toks = runtime::parse_token_list(o->tokens);
    runtime::Engine engine(o->engine);
    auto seq = engine.new_sequence();
    const std::vector<float>& logits = engine.eval(*seq, toks, /*all_logits=*/true);
    FILE* f = std::fopen(o->out.c_str(), "wb");
    if (!f) fail("%s: cannot write: %s", o->out.c_str(), std::strerror(errno));
    bool ok = std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) fail("%s: write failed", o->out.c_str());
    return 0;
  };
}

TERN_COMMAND(logits, "logits", "Write teacher-forced logits for a token sequence", setup_logits);

}  // namespace tern::cli
