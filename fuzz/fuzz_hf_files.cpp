// libFuzzer target: what `tern convert` reads from a Hugging Face checkpoint besides the safetensors (those are
// fuzz_safetensors'): config.json through convert::parse_config (model type, text_config merge, GLM-5's AutoConfig
// defaults, every geometry key), then the GGUF tokenizer keys convert::build_vocab writes from tokenizer.json,
// tokenizer_config.json and config.json (files in a temporary directory, as a checkpoint's). Also the library's
// own HF tokenizer reader (text/load_hf: parse_hf_tokenizer) on the same two files, the Tokenizer built from it
// encoding and decoding a few strings. The input is config.json, a NUL byte,
// tokenizer.json, a NUL byte, tokenizer_config.json (missing parts are empty). Any outcome but success or
// tern::Error is a bug (an nlohmann exception escaping means a value's JSON type was not checked).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "convert/hf_config.h"
#include "convert/metadata.h"
#include "core/error.h"
#include "text/tokenizer.h"

namespace {

constexpr size_t kMaxLen = 64 * 1024;  // a tokenizer.json of a few hundred entries; larger only slows the search

std::string_view part(std::string_view& rest) {
  const size_t nul = rest.find('\0');
  const std::string_view p = rest.substr(0, nul);
  rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  return p;
}

// build_vocab's work is linear in vocab_size by design (a token string per id); above this the harness skips it.
constexpr int64_t kMaxVocab = 1 << 16;

void write(const std::filesystem::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

void config(std::string_view text, std::string_view tok_json, std::string_view cfg_json) {
  namespace fs = std::filesystem;
  tern::convert::Checkpoint ck;
  ck.config_json = tern::convert::OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (ck.config_json.is_discarded()) return;  // malformed JSON: read_json_file's Error, not this target's subject
  try {
    ck.hp = tern::convert::parse_config(ck.config_json, "config.json", &ck.hparams);
  } catch (const tern::Error&) {
    return;
  }
  const tern::convert::HParams& hp = ck.hp;
  if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_vocab <= 0 || hp.model_type.empty() || !ck.hparams.is_object())
    __builtin_trap();
  if (!hp.recurrent.empty() && static_cast<int64_t>(hp.recurrent.size()) != hp.n_layer) __builtin_trap();
  if (hp.n_vocab > kMaxVocab) return;
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("tern-fuzz-hf-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  ck.dir = dir.string();
  write(dir / "tokenizer.json", tok_json);
  if (cfg_json.empty()) fs::remove(dir / "tokenizer_config.json");
  else write(dir / "tokenizer_config.json", cfg_json);
  try {
    const tern::convert::KeyValues kv = tern::convert::build_vocab(ck, {});
    if (kv.empty()) __builtin_trap();
  } catch (const tern::Error&) {
  }
}

void tokenizer(std::string_view tok_json, std::string_view cfg_json) {
  try {
    tern::text::Tokenizer tok(tern::text::parse_hf_tokenizer(tok_json, cfg_json, "tokenizer.json"));
    for (const char* s : {"Hello world 123", "<|im_start|>user\n\xc3\xa9t\xc3\xa9  \t!", ""}) {
      const std::vector<int32_t> ids = tok.encode(s, true);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
      (void)tok.decode(ids);
    }
  } catch (const tern::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxLen) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string_view cfg = part(rest), tok = part(rest), tok_cfg = part(rest);
  config(cfg, tok, tok_cfg);
  tokenizer(tok, tok_cfg);
  return 0;
}
