#include "models/glm_dsa/model.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "formats/hybrid_layers.h"

namespace tern::models::glm_dsa {

ModelInfo model_info(const Config& c) {
  ModelInfo i = common_model_info(c);
  char s[200];
  std::snprintf(s, sizeof s, "%lld layers (MLA, %lld with their own indexer top-%lld), %lld dense, %lld experts top-%lld",
                static_cast<long long>(c.n_layer), static_cast<long long>(c.n_full_indexer_layers()),
                static_cast<long long>(c.idx_topk), static_cast<long long>(c.n_dense),
                static_cast<long long>(c.n_expert), static_cast<long long>(c.n_expert_used));
  i.summary = s;
  i.mtp_drafts = c.mtp_drafts();
  return i;
}

StateShape state_shape(const Config& c) {
  StateShape s(static_cast<size_t>(c.n_layer + (c.n_nextn > 0 ? 1 : 0)));
  for (size_t i = 0; i < s.size(); ++i) {
    LayerStateShape& l = s[i];
    l.n_head_kv = 1;
    l.head_dim = c.kv_lora + c.rope;
    // The MTP block's layer (last, in the draft state) keeps indexer keys whenever the model has an indexer: it
    // drafts only with one of its own (Config::mtp_drafts).
    const bool trunk = static_cast<int64_t>(i) < c.n_layer;
    l.v_dim = (trunk ? c.idx_full[i] : c.idx_heads > 0) ? c.idx_dim : 0;
    l.plain_rows = true;
    l.draft = !trunk;
  }
  return s;
}

// Forward scratch per batch row (floats), mirroring the buffers Forward and the blocks grow: the residual stream and
// norms, the MLA block's projections, absorbed queries and per-head outputs, the indexer's, the MoE block's (router,
// every (token, expert) pair's SwiGLU rows and the shared expert) and the dense FFN's; the logits twice. Plus the
// expanded MLA form's scratch for the longest segment it runs on: one whose queries attend every key, so at most
// index_topk rows with an indexer (else the trained context).
uint64_t buffer_bytes(const Config& c, int64_t rows, int n_parallel) {
  const int64_t D = c.n_embd, H = c.n_head, dc = c.kv_lora + c.rope;
  const int64_t mla = c.q_lora + H * (c.nope + c.rope) + 3 * dc + c.rope + H * dc + c.nope + 3 * c.kv_lora +
                      H * c.kv_lora + c.v_head + H * c.v_head;
  const int64_t idx = c.idx_heads * c.idx_dim + c.idx_dim + c.idx_heads + 2 * c.idx_topk;
  const int64_t jobs = c.n_expert_used + (c.n_ff_shexp > 0 ? 1 : 0);
  const int64_t F = std::max(c.n_ff_exp, c.n_ff_shexp);
  const int64_t moe = c.n_expert + 2 * c.n_expert_used + jobs * (D + 2 * F) + 2 * D + 1;
  // The dense layers' FFN scratch and the MoE layers' are separate buffers, both kept once grown.
  const int64_t ffn = (c.n_dense < c.n_layer ? moe : 0) + (c.n_dense > 0 ? 2 * c.n_ff : 0);
  const int64_t draft = c.n_nextn > 0 ? 4 * D : 0;  // the MTP block's inputs: embeddings, hidden states, their concat
  const int64_t per_row = 6 * D + mla + idx + ffn + draft;
  const int64_t logits = 2 * c.n_vocab * n_parallel;
  const int64_t expanded = mla_expanded_scratch_floats(c.mla(), c.idx_heads > 0 ? std::min(c.idx_topk, c.n_ctx_train)
                                                                                  : c.n_ctx_train);
  return static_cast<uint64_t>((per_row * rows + logits + expanded) * 4);
}

WeightBytes weight_bytes(const gguf::File& f, const Config& c, bool repack, bool repack_experts) {
  WeightBytes w;
  const int64_t n_blocks = c.n_layer + (c.n_nextn > 0 ? 1 : 0);
  w.expert_bytes.assign(static_cast<size_t>(n_blocks), 0);  // the trunk and the MTP block (streamed alike)
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int64_t il = gguf::block_index(t.name);
    if (il >= n_blocks) continue;
    w.repacked |= tensor_repacked(t, c, repack, repack_experts);
    const uint64_t bytes = resident_tensor_bytes(t, c, repack, repack_experts) + key_expansion_bytes(t, c);
    if (il == c.n_layer) w.mtp += bytes;
    if (il >= 0 && t.name.find("_exps.") != std::string_view::npos) {
      w.experts += bytes;
      w.expert_bytes[static_cast<size_t>(il)] += bytes / static_cast<uint64_t>(std::max<int64_t>(c.n_expert, 1));
    } else {
      w.dense += bytes;
    }
  }
  return w;
}

LoadedModel::LoadedModel(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be)
    : m_(glm_dsa::Model::load(std::move(file), std::move(be))), info_(model_info(m_->config)) {}

RepackReport LoadedModel::repack(RepackScope scope) {
  if (fwd_) fail("internal: repack after start");
  return m_->repack(scope);
}

void LoadedModel::set_mla_form(MlaForm form) {
  if (fwd_) fail("internal: set_mla_form after start");
  m_->config.mla_form = form;
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

}  // namespace tern::models::glm_dsa
