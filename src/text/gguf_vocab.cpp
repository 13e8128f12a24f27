#include "text/gguf_vocab.h"

#include "core/error.h"
#include "formats/gguf.h"

namespace tern::text {

TokenizerData tokenizer_data_from_gguf(const gguf::File& f) {
  TokenizerData d;
  d.source = f.name();
  const std::string model(f.get_str("tokenizer.ggml.model"));
  if (model != "gpt2")
    fail("%s: tokenizer.ggml.model '%s' is not supported (supported: gpt2, byte-level BPE)", f.name().c_str(),
         model.c_str());
  d.pre = std::string(f.opt_str("tokenizer.ggml.pre").value_or("default"));
  const gguf::Value& toks = f.get_arr("tokenizer.ggml.tokens");
  if (toks.array_type() != gguf::ValueType::String)
    fail("%s: tokenizer.ggml.tokens must be an array of strings", f.name().c_str());
  const uint64_t n = toks.array_size();
  d.tokens.reserve(n);
  for (uint64_t i = 0; i < n; ++i) d.tokens.emplace_back(toks.array_str(i));
  if (const gguf::Value* tt = f.opt_arr("tokenizer.ggml.token_type")) {
    if (tt->array_size() != n)
      fail("%s: tokenizer.ggml.token_type has %llu entries, tokenizer.ggml.tokens %llu", f.name().c_str(),
           static_cast<unsigned long long>(tt->array_size()), static_cast<unsigned long long>(n));
    d.token_type.reserve(n);
    for (uint64_t i = 0; i < n; ++i) d.token_type.push_back(static_cast<int32_t>(tt->array_i64(i)));
  }
  if (const gguf::Value* m = f.opt_arr("tokenizer.ggml.merges")) {
    d.merges.reserve(m->array_size());
    for (uint64_t i = 0; i < m->array_size(); ++i) d.merges.emplace_back(m->array_str(i));
  }
  auto id = [&](const char* key) -> int32_t {
    auto v = f.opt_u32(key);
    if (!v) return -1;
    if (*v >= n) fail("%s: %s = %u is outside the vocabulary (%llu tokens)", f.name().c_str(), key, *v,
                      static_cast<unsigned long long>(n));
    return static_cast<int32_t>(*v);
  };
  d.bos_id = id("tokenizer.ggml.bos_token_id");
  d.eos_id = id("tokenizer.ggml.eos_token_id");
  d.eot_id = id("tokenizer.ggml.eot_token_id");
  d.eom_id = id("tokenizer.ggml.eom_token_id");
  d.pad_id = id("tokenizer.ggml.padding_token_id");
  apply_gguf_pre_defaults(&d);
  d.add_bos = f.opt_bool("tokenizer.ggml.add_bos_token").value_or(d.add_bos);
  return d;
}

std::optional<std::string> chat_template_from_gguf(const gguf::File& f) {
  if (auto s = f.opt_str("tokenizer.chat_template")) return std::string(*s);
  return std::nullopt;
}

}  // namespace tern::text
