// Split regexes of the supported pre-tokenizers, verbatim from the models' tokenizer.json files (llama.cpp's
// src/llama-vocab.cpp quotes the same originals for LLAMA_VOCAB_PRE_TYPE_QWEN2 / QWEN35; the GLM-4 tokenizer.json
// uses the cl100k-style pattern that llama.cpp spells out for CHATGLM4).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenize.h"

#include <pcre2.h>

#include <array>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace tern::text {
namespace {

constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGlm4Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreName {
  std::string_view name;
  PreType type;
};
constexpr std::array<PreName, 4> kPreNames = {{
    {"qwen35", PreType::kQwen35}, {"qwen2", PreType::kQwen2}, {"glm4", PreType::kGlm4}, {"glm5", PreType::kGlm4}}};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

PreType parse_pre_type(std::string_view name) {
  for (const PreName& p : kPreNames)
    if (p.name == name) return p.type;
  fail("unsupported tokenizer pre-tokenizer type '%.*s'; supported: qwen35, qwen2, glm4 (alias glm5)",
       static_cast<int>(name.size()), name.data());
}

const char* pre_type_name(PreType pre) {
  switch (pre) {
    case PreType::kQwen35: return "qwen35";
    case PreType::kQwen2: return "qwen2";
    case PreType::kGlm4: return "glm4";
  }
  return "?";
}

void apply_gguf_pre_defaults(TokenizerData* d) {
  switch (parse_pre_type(d->pre)) {
    case PreType::kQwen35:
    case PreType::kQwen2:
      d->nfc = true;
      break;
    case PreType::kGlm4:
      d->ignore_merges = true;
      d->add_bos = false;
      break;
  }
}

std::string_view PreTokenizer::hf_regex(PreType pre) {
  switch (pre) {
    case PreType::kQwen35: return kQwen35Regex;
    case PreType::kQwen2: return kQwen2Regex;
    case PreType::kGlm4: return kGlm4Regex;
  }
  return {};
}

PreTokenizer::PreTokenizer(PreType pre) {
  const std::string_view re = hf_regex(pre);
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(), PCRE2_UTF | PCRE2_UCP, &err, &off,
                        nullptr);
  if (!code_) fail("pre-tokenizer %s: regex does not compile at %zu: %s", pre_type_name(pre), off,
                   pcre2_message(err).c_str());
  // JIT only changes speed, never results; say once when it is unavailable.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  static bool logged = false;
  if (!jit_ && !logged) {
    logged = true;
    log::info("tokenizer: PCRE2 JIT unavailable, pre-tokenizer regex runs interpreted (slower)");
  }
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(code_); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  if (!md) fail("pre-tokenizer: out of memory for PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;  // everything before pos has been emitted
  while (pos < text.size()) {
    // NO_UTF_CHECK: the caller has validated the whole text, and pos is always on a character boundary.
    int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                  : pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::string msg = pcre2_message(rc);
      pcre2_match_data_free(md);
      fail("pre-tokenizer: regex match failed at byte %zu of %zu: %s", pos, text.size(), msg.c_str());
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) break;  // cannot happen (every branch consumes); the rest becomes one gap piece below
    if (b > pos) pieces->push_back(text.substr(pos, b - pos));  // unmatched gap: its own piece (Isolated)
    pieces->push_back(text.substr(b, e - b));
    pos = e;
  }
  if (pos < text.size()) pieces->push_back(text.substr(pos));
  pcre2_match_data_free(md);
}

}  // namespace tern::text
