// The hybrid layer rule follows llama.cpp's qwen35/qwen35moe/qwen3next loaders and HF's Qwen3NextConfig /
// Qwen3_5MoeTextConfig: an explicit recurrent-layer list wins, else layer i is full attention iff
// (i + 1) % full_attention_interval == 0 (default 4); NextN blocks sit after the trunk.
#include "formats/hybrid_layers.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_util.h"

namespace tern::gguf {

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::kAttention: return "attention";
    case LayerKind::kRecurrent: return "recurrent";
    case LayerKind::kNextN: return "nextn";
  }
  return "?";
}

namespace {

void check_counts(const std::string& source, int64_t n_layer, int64_t n_nextn) {
  if (n_layer < 0 || n_nextn < 0)
    fail("%s: %lld trunk layers and %lld NextN layers: counts must not be negative", source.c_str(),
         static_cast<long long>(n_layer), static_cast<long long>(n_nextn));
  if (n_layer > int64_t{kMaxLayers} || n_nextn > int64_t{kMaxLayers} - n_layer)
    fail("%s: %lld trunk layers + %lld NextN layers, more than the %u tern accepts", source.c_str(),
         static_cast<long long>(n_layer), static_cast<long long>(n_nextn), kMaxLayers);
}

}  // namespace

std::vector<LayerKind> hybrid_layer_kinds(const HybridLayerRule& r) {
  check_counts(r.source, r.n_layer, r.n_nextn);
  std::vector<LayerKind> kinds(static_cast<size_t>(r.n_layer + r.n_nextn), LayerKind::kNextN);
  if (r.recurrent) {
    if (static_cast<int64_t>(r.recurrent->size()) < r.n_layer)
      fail("%s: key '%s': %zu per-layer flags, expected at least %lld (one per layer)", r.source.c_str(),
           printable(r.recurrent_key).c_str(), r.recurrent->size(), static_cast<long long>(r.n_layer));
    for (int64_t i = 0; i < r.n_layer; ++i)
      kinds[i] = (*r.recurrent)[static_cast<size_t>(i)] ? LayerKind::kRecurrent : LayerKind::kAttention;
    return kinds;
  }
  const int64_t interval = r.interval.value_or(kDefaultFullAttentionInterval);
  if (interval < 1)
    fail("%s: key '%s' = %lld: the full-attention interval must be at least 1", r.source.c_str(),
         printable(r.interval_key).c_str(), static_cast<long long>(interval));
  for (int64_t i = 0; i < r.n_layer; ++i)
    kinds[i] = (i + 1) % interval == 0 ? LayerKind::kAttention : LayerKind::kRecurrent;
  return kinds;
}

HybridLayers read_hybrid_layers(const File& f, std::string_view arch, int64_t n_layer, int64_t n_nextn) {
  const std::string a = std::string(arch) + ".";
  HybridLayerRule r;
  r.n_layer = n_layer;
  r.n_nextn = n_nextn;
  r.source = f.name();
  r.recurrent_key = a + "attention.recurrent_layers";
  r.interval_key = a + "full_attention_interval";
  check_counts(r.source, n_layer, n_nextn);  // before any table is sized by n_layer
  HybridLayers out;
  if (const Value* rec = f.find(r.recurrent_key); rec && !rec->is_array()) {
    r.recurrent.emplace(static_cast<size_t>(n_layer), f.get_bool(r.recurrent_key));
    out.rule = r.recurrent_key + " (one value for all layers)";
  } else if (rec) {
    // Only the trunk's flags are read: the array may be as long as kMaxArrayLength.
    const uint64_t n = std::min<uint64_t>(rec->array_size(), static_cast<uint64_t>(n_layer));
    r.recurrent.emplace();
    try {
      for (uint64_t i = 0; i < n; ++i) r.recurrent->push_back(rec->array_i64(i) != 0);
    } catch (const Error& e) {
      fail("%s: %s", f.name().c_str(), e.what());
    }
    out.rule = r.recurrent_key;
  } else {
    const bool has_interval = f.find(r.interval_key) != nullptr;
    if (has_interval) r.interval = f.get_u32(r.interval_key);
    out.rule = strf("full attention every %lld layers (%s)",
                    static_cast<long long>(r.interval.value_or(kDefaultFullAttentionInterval)),
                    has_interval ? "full_attention_interval" : "default, no full_attention_interval key");
  }
  out.kinds = hybrid_layer_kinds(r);
  return out;
}

int64_t block_index(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  const char* b = name.data() + kPrefix.size();
  const char* e = name.data() + name.size();
  uint64_t n = 0;  // unsigned: from_chars then takes no sign
  const auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc() || p == b || p == e || *p != '.' || n > static_cast<uint64_t>(INT64_MAX)) return -1;
  return static_cast<int64_t>(n);
}

}  // namespace tern::gguf
