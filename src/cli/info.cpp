// `tern info MODEL [--json]`: what a GGUF holds (architecture, geometry, layer kinds, tensor types, parameter
// counts, decode bytes per token), from formats/model_summary. Reads metadata only: tensor data is never touched.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_util.h"
#include "formats/model_summary.h"
#include "models/registry.h"

namespace tern::cli {

namespace {

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024 && u < 4) x /= 1024, ++u;
  return u == 0 ? strf("%" PRIu64 " B", b) : strf("%.2f %s", x, units[u]);
}

std::string human_count(uint64_t n) {
  if (n >= 1000000000ull) return strf("%.2f B", n / 1e9);
  if (n >= 1000000ull) return strf("%.2f M", n / 1e6);
  if (n >= 1000ull) return strf("%.2f K", n / 1e3);
  return strf("%" PRIu64, n);
}

// "30 recurrent, 10 attention (layers 3, 7, ...)" for hybrid models.
std::string describe_layers(const gguf::ModelSummary& s) {
  if (s.layer_kinds.empty()) return "";
  uint32_t n_rec = 0, n_att = 0, n_mtp = 0;
  std::string att;
  for (size_t i = 0; i < s.layer_kinds.size(); ++i) {
    switch (s.layer_kinds[i]) {
      case gguf::LayerKind::kRecurrent: ++n_rec; break;
      case gguf::LayerKind::kAttention: ++n_att, att += strf(att.empty() ? "%zu" : ", %zu", i); break;
      case gguf::LayerKind::kNextN: ++n_mtp; break;
    }
  }
  std::string out = strf("%u recurrent (gated delta net), %u full attention [%s]", n_rec, n_att, att.c_str());
  if (n_mtp) out += strf(", %u nextn (MTP)", n_mtp);
  return out + "; " + s.layer_rule;
}

void print_text(const gguf::File& f, const gguf::ModelSummary& s) {
  using gguf::printable;
  std::printf("file:          %s (%s, GGUF v%u, alignment %" PRIu64 ", %zu metadata keys)\n", printable(s.file, 400).c_str(),
              human_bytes(s.file_bytes).c_str(), s.version, f.alignment(), f.metadata().size());
  std::printf("architecture:  %s%s\n", s.architecture.empty() ? "(none: no general.architecture key)" :
              printable(s.architecture).c_str(), s.name.empty() ? "" : ("  (" + printable(s.name) + ")").c_str());
  if (!s.architecture.empty()) {
    std::printf("layers:        %u\n", s.n_layer);
    if (!s.layer_kinds.empty()) std::printf("layer kinds:   %s\n", describe_layers(s).c_str());
    std::printf("attention:     %u heads, %u kv heads, head dim %u\n", s.n_head, s.n_head_kv, s.head_dim);
    std::string widths = strf("embd %u", s.n_embd);
    if (s.n_ff) widths += strf(", ffn %u", s.n_ff);
    widths += strf(", vocab %" PRIu64 ", context %" PRIu64, s.n_vocab, s.n_ctx_train);
    std::printf("widths:        %s\n", widths.c_str());
    if (s.n_expert)
      std::printf("experts:       %u routed, %u used per token, expert ffn %u, shared expert ffn %u\n", s.n_expert,
                  s.n_expert_used, s.n_ff_exp, s.n_ff_shexp);
    for (const auto& [k, v] : s.extra) std::printf("  %-26s %" PRId64 "\n", printable(k).c_str(), v);
  } else {
    std::printf("vocab:         %" PRIu64 "\n", s.n_vocab);
  }
  std::printf("tensors:       %" PRIu64 " (%s)\n", s.n_tensors, human_bytes(s.tensor_bytes).c_str());
  for (const auto& [name, st] : s.by_type)
    std::printf("  %-8s %6" PRIu64 " tensors  %12s  %10s params\n", name.c_str(), st.count,
                human_bytes(st.bytes).c_str(), human_count(st.params).c_str());
  std::printf("parameters:    %s total, %s active per token\n", human_count(s.n_params).c_str(),
              human_count(s.n_params_active).c_str());
  std::printf("decode reads:  %s of weights per token\n", human_bytes(s.bytes_per_token).c_str());
  if (s.n_layer_nextn > 0) {  // the MTP blocks after the trunk: speculative decoding's draft (the first one)
    uint64_t bytes = 0;
    const int64_t first = int64_t{s.n_layer} - s.n_layer_nextn;
    for (const auto& t : f.tensors())
      if (gguf::block_index(t.name) >= first) bytes += t.n_bytes;
    bool drafts = false;
    try {
      drafts = models::describe_model(f)->info().mtp_drafts;
    } catch (const Error&) {  // an architecture tern does not run: the summary above still stands
    }
    std::printf("mtp:           %u block(s) from blk.%lld, %s; %s\n", s.n_layer_nextn, static_cast<long long>(first),
                human_bytes(bytes).c_str(),
                drafts ? "drafts for speculative decoding (--draft, --no-spec)"
                       : "loaded, not used for drafting by tern for this architecture");
    if (const gguf::Value* dv = f.find("tern.draft_vocab"); dv && dv->is_array())
      std::printf("draft vocab:   %llu tokens (tern.draft_vocab: the draft head computes only these)\n",
                  static_cast<unsigned long long>(dv->array_size()));
  }
}

RunFn setup_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  app.add_option("model", *path, "GGUF model file")->required();
  app.add_flag("--json", *json, "Print one JSON object instead of text");
  return [path, json] {
    const gguf::File f = gguf::File::open(*path);
    const gguf::ModelSummary s = gguf::summarize(f);
    if (*json) {
      // Names in the file need not be UTF-8: replace invalid bytes rather than throw.
      std::printf("%s\n", gguf::to_json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      print_text(f, s);
    }
    return 0;
  };
}

}  // namespace

TERN_COMMAND(info, "info", "Describe a GGUF model: architecture, geometry, tensors, parameters", setup_info);

}  // namespace tern::cli
