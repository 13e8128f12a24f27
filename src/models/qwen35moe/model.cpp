#include "models/qwen35moe/model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "formats/hybrid_layers.h"
#include "models/qwen35moe/state.h"

namespace tern::models::qwen35moe {

ModelInfo model_info(const Config& c) {
  ModelInfo i = common_model_info(c);
  i.mtp_drafts = c.n_nextn > 0;
  char s[160];
  const int n = std::snprintf(s, sizeof s, "%lld layers (%lld attention, %lld DeltaNet), ",
                              static_cast<long long>(c.n_layer), static_cast<long long>(c.n_attention_layers()),
                              static_cast<long long>(c.n_deltanet_layers()));
  if (c.dense())
    std::snprintf(s + n, sizeof s - n, "dense FFN %lld", static_cast<long long>(c.n_ff));
  else
    std::snprintf(s + n, sizeof s - n, "%lld experts top-%lld", static_cast<long long>(c.n_expert),
                  static_cast<long long>(c.n_expert_used));
  i.summary = s;
  return i;
}

// Forward scratch per batch row (floats), mirroring the buffers Forward and the blocks grow: residual stream,
// attention and DeltaNet projections, the router and routing weights, the MoE block's SwiGLU rows and down
// outputs for every (token, expert) pair and the shared expert, the batch quantized in up to two formats and
// down's quantized input (counted at 4 bytes an element, the f32 bound), and the kernels' activation scratch;
// the logits twice (backend scratch and the host copy).
uint64_t buffer_bytes(const Config& c, int64_t rows, int n_parallel) {
  const int64_t D = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
  const int64_t attn = 5 * q + 2 * kv;
  const int64_t dn = 2 * c.conv_dim() + 2 * c.value_dim() + 2 * c.n_v_heads;
  const int64_t jobs = c.n_expert_used + (c.n_ff_shexp > 0 ? 1 : 0);
  const int64_t F = std::max(c.n_ff_exp, c.n_ff_shexp);
  const int64_t moe = c.dense() ? 2 * c.n_ff : c.n_expert + 2 * c.n_expert_used + jobs * (D + 2 * F) + 2 * D + 1;
  const int64_t hidden = 2 * D + (c.n_nextn > 0 ? 4 * D : 0);  // normed rows kept for drafting; the MTP block's inputs
  const int64_t per_row = 4 * D + attn + dn + moe + hidden;
  const int64_t logits = 2 * c.n_vocab * n_parallel;  // in backend scratch, and the host copy forward() returns
  return static_cast<uint64_t>((per_row * rows + logits) * 4);
}

namespace {

// Resident weight bytes, each tensor counted at share(name) of its bytes (1: a whole model; a rank's fraction:
// rank_weight_bytes), and extra_share of a tied head's repacked copy.
template <class Share>
WeightBytes shared_weight_bytes(const gguf::File& f, const Config& c, bool repack, bool repack_experts, Share share,
                                double extra_share) {
  WeightBytes w;
  const int64_t n_blocks = c.n_layer + (c.n_nextn > 0 ? 1 : 0);  // the trunk and the first MTP block
  w.expert_bytes.assign(static_cast<size_t>(n_blocks), 0);
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int64_t il = gguf::block_index(t.name);
    if (il >= n_blocks) continue;  // MTP blocks past the first: never loaded
    w.repacked |= tensor_repacked(t, c, repack, repack_experts);
    const auto bytes = static_cast<uint64_t>(static_cast<double>(resident_tensor_bytes(t, c, repack, repack_experts)) *
                                             share(t.name));
    if (il == c.n_layer) w.mtp += bytes;
    if (il >= 0 && t.name.find("_exps.") != std::string_view::npos) {
      w.experts += bytes;
      w.expert_bytes[static_cast<size_t>(il)] += bytes / static_cast<uint64_t>(c.n_expert);
    } else {
      w.dense += bytes;
    }
  }
  w.dense += static_cast<uint64_t>(static_cast<double>(repack_extra_bytes(f, c, repack)) * extra_share);
  // A draft vocabulary: the MTP head's copy of those rows (repacked with the rest; on every rank).
  const uint64_t dv = draft_vocab_bytes(f, c, repack);
  w.dense += dv;
  w.mtp += dv;
  return w;
}

}  // namespace

WeightBytes weight_bytes(const gguf::File& f, const Config& c, bool repack, bool repack_experts) {
  return shared_weight_bytes(f, c, repack, repack_experts, [](std::string_view) { return 1.0; }, 1.0);
}

StateShape Shape::state_shape() const { return qwen35moe::state_shape(ranks_ > 1 ? local_ : c_); }

WeightBytes rank_weight_bytes(const gguf::File& f, const Config& c, const Config& l, int ranks, bool repack,
                              bool repack_experts) {
  const double R = ranks;
  const bool attn = l.n_head != c.n_head, dn = l.n_v_heads != c.n_v_heads;  // the mixers that split
  // The fraction of a tensor this rank holds (Model::distribute's rules; a dense FFN is on one rank in R per layer).
  auto share = [&](std::string_view n) -> double {
    auto has = [&](const char* s) { return n.find(s) != std::string_view::npos; };
    if (has("_exps.") || has("_shexp.weight") || n == "output.weight" || has("shared_head_head")) return 1 / R;
    if (has("ffn_gate.") || has("ffn_up.") || has("ffn_down.")) return 1 / R;
    if (has("attn_q.")) return double(l.n_head) / double(c.n_head);
    if (has("attn_k.") || has("attn_v.")) return double(l.n_head_kv) / double(c.n_head_kv);
    if (has("attn_output.")) return attn ? 1 / R : 1;
    if (has("attn_qkv.")) return double(l.conv_dim()) / double(c.conv_dim());
    if (has("attn_gate.")) return double(l.value_dim()) / double(c.value_dim());
    if (has("ssm_out.")) return dn ? 1 / R : 1;
    return 1;  // embeddings (a lookup), norms, routers, the shared expert's gate, beta / alpha: on every rank
  };
  return shared_weight_bytes(f, c, repack, repack_experts, share, 1 / R);  // a tied head's rows: 1/R
}

LoadedModel::LoadedModel(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be)
    : m_(qwen35moe::Model::load(std::move(file), std::move(be))), info_(model_info(m_->config)) {}

StateShape LoadedModel::state_shape() const { return qwen35moe::state_shape(m_->config); }

void LoadedModel::distribute(Comm& comm, const SplitOptions& opt) {
  if (fwd_) fail("internal: distribute after start");
  m_->distribute(comm, opt);
}

RepackReport LoadedModel::repack(RepackScope scope) {
  if (fwd_) fail("internal: repack after start");
  return m_->repack(scope);
}

void LoadedModel::start(TensorDump dump, int64_t expert_slots) {
  fwd_ = std::make_unique<Forward>(*m_, std::move(dump), expert_slots);
}

const std::vector<float>& LoadedModel::forward(std::vector<SeqInput>& batch) {
  if (!fwd_) fail("internal: forward before start");
  return fwd_->run(batch);
}

const std::vector<float>& LoadedModel::hidden() const {
  if (!fwd_) fail("internal: hidden before start");
  return fwd_->hidden();
}

const std::vector<float>& LoadedModel::forward_draft(std::vector<DraftInput>& batch) {
  if (!fwd_) fail("internal: forward_draft before start");
  return fwd_->run_draft(batch);
}

}  // namespace tern::models::qwen35moe
