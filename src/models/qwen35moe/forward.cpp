#include "models/qwen35moe/forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "models/batch_io.h"
#include "quant/repack.h"

namespace tern::models::qwen35moe {

Forward::Forward(const Model& model, TensorDump dump, int64_t expert_slots)
    : model_(model),
      be_(*model.backend),
      c_(model.config),
      attn_params_(c_.attention()),
      dn_params_(c_.deltanet()),
      moe_params_(c_.moe()),
      dump_(std::move(dump)),
      experts_(expert_slots > 0 ? std::make_unique<ExpertStore>(model.expert_layout(), expert_slots)
                                : std::make_unique<ExpertStore>(model.expert_layout())),
      share_{0, model.config.n_vocab, nullptr} {}

void Forward::layer(int il, const std::vector<Segment>& segs, int64_t n_rows) {
  const LayerWeights& w = model_.weights.layers[il];
  const int64_t D = c_.n_embd;
  float* x = x_.grow<float>(be_, n_rows * D);  // already this size: run() filled it
  float* cur = cur_.grow<float>(be_, n_rows * D);
  float* mix = mix_.grow<float>(be_, n_rows * D);

  be_.rms_norm(x, w.attn_norm.data(), cur, n_rows, D, c_.rms_eps);
  dump_("attn_norm", il, cur, {n_rows, D});
  const TensorSplit* as = model_.attn_split.comm ? &model_.attn_split : nullptr;
  const TensorSplit* ds = model_.dn_split.comm ? &model_.dn_split : nullptr;
  if (w.kind == LayerKind::kAttention) attention_block(be_, attn_params_, w.attn, il, segs, cur, n_rows, mix, attn_, dump_, as);
  else deltanet_block(be_, dn_params_, w.dn, il, segs, cur, n_rows, mix, dn_, dump_, ds);
  be_.add(x, mix, n_rows * D);
  dump_("attn_residual", il, x, {n_rows, D});

  be_.rms_norm(x, w.post_norm.data(), cur, n_rows, D, c_.rms_eps);
  dump_("attn_post_norm", il, cur, {n_rows, D});
  const MoeSplit* ms = model_.moe_split.comm ? &model_.moe_split : nullptr;
  if (!c_.dense()) moe_block(be_, moe_params_, w.moe, *experts_, il, cur, n_rows, mix, moe_, dump_, ms);
  else ffn_block(be_, w.ffn, il, cur, n_rows, mix, ffn_, dump_, model_.ffn_split.comm ? &model_.ffn_split : nullptr);
  if (model_.distributed() && !c_.dense() && !ms) {  // expert parallel: each rank holds a partial sum
    TERN_PROFILE(prof_comm, "comm.ffn_sum", 0);
    sum_over_ranks(*model_.comm, mix, n_rows * D, reduce_);
  }
  be_.add(x, mix, n_rows * D);
  dump_("l_out", il, x, {n_rows, D});
}

const std::vector<float>& Forward::run(std::vector<SeqInput>& batch) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  // Validate everything before touching any state.
  const int64_t n_rows = check_batch(batch, V);
  float* x = x_.grow<float>(be_, n_rows * D);
  TERN_PROFILE(prof_embd, "embed", n_rows * model_.weights.token_embd.row_bytes);
  const std::vector<Segment> segs = embed_batch(be_, model_.weights.token_embd, batch, D, x);
  prof_embd.done();
  dump_("inp_embd", -1, x, {n_rows, D});

  for (int il = 0; il < c_.n_layer; ++il) layer(il, segs, n_rows);
  for (const Segment& sg : segs) sg.state->advance(sg.n_tokens);

  // Rows that need logits (and hidden states), then the final norm and LM head over just those.
  output_rows(batch, segs, out_index_, hid_index_);
  TERN_PROFILE(prof_head, "lm_head", model_.weights.output.bytes());
  return head(model_.weights.output, model_.weights.output_norm.data(), n_rows, !hid_index_.empty());
}

const std::vector<float>& Forward::head(const Linear& w, const float* norm_w, int64_t n_rows, bool keep_hidden,
                                        const std::vector<int32_t>* vocab) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  const int64_t n_out = static_cast<int64_t>(out_index_.size());
  const float* x = x_.grow<float>(be_, n_rows * D);
  if (!keep_hidden) hid_index_.clear();
  const float* rows = norm_output_rows(be_, x, n_rows, D, norm_w, c_.rms_eps, out_index_, hid_index_, out_norm_, hidden_);
  dump_("result_norm", -1, rows, {n_out, D});
  share_ = {0, V, nullptr};
  const int64_t cols = vocab ? static_cast<int64_t>(vocab->size()) : V;
  float* logits = logits_dev_.grow<float>(be_, n_out * cols);
  if (!vocab && model_.distributed()) {  // this rank's vocabulary rows; every rank's, gathered
    const Comm& comm = *model_.comm;
    const int R = comm.size();
    const int64_t mine = model_.vocab.size(comm.rank());
    if (w.n_out != mine) fail("internal: LM head has %lld rows, this rank's share is %lld", static_cast<long long>(w.n_out),
                              static_cast<long long>(mine));
    be_.matmul(w, rows, n_out, logits);
    part_.resize(static_cast<size_t>(n_out * mine));
    logits_dev_.read(part_.data(), part_.size() * sizeof(float));
    if (local_logits_) {  // the caller reduces across ranks (models/model.h LogitsShare)
      share_ = {model_.vocab.begin(comm.rank()), mine, model_.comm};
      return part_;
    }
    logits_.resize(static_cast<size_t>(n_out * V));
    TERN_PROFILE(prof_comm, "comm.logits", 0);
    gather_columns(*model_.comm, ColumnLayout::contiguous(V, quant::kRepackRows, R), part_.data(), n_out, logits_.data(),
                   gathered_);
    prof_comm.done();
    dump_("result_output", -1, logits_.data(), {n_out, V});
    return logits_;
  }
  be_.matmul(w, rows, n_out, logits);
  dump_("result_output", -1, logits, {n_out, cols});
  logits_.resize(static_cast<size_t>(n_out * V));
  if (!vocab) {
    logits_dev_.read(logits_.data(), logits_.size() * sizeof(float));  // the host copy callers sample from
    return logits_;
  }
  sub_logits_.resize(static_cast<size_t>(n_out * cols));
  logits_dev_.read(sub_logits_.data(), sub_logits_.size() * sizeof(float));
  std::fill(logits_.begin(), logits_.end(), -INFINITY);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t j = 0; j < cols; ++j) logits_[r * V + (*vocab)[j]] = sub_logits_[r * cols + j];
  return logits_;
}

const std::vector<float>& Forward::run_draft(std::vector<DraftInput>& batch) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  if (!model_.weights.has_mtp) fail("this model has no MTP block to draft with");
  const MtpWeights& m = model_.weights.mtp;
  const int il = static_cast<int>(c_.n_layer);
  int64_t n_rows = 0;
  const std::vector<Segment> segs =
      mtp_input_rows(be_, {&m.embed, &m.eh_proj, m.enorm.data(), m.hnorm.data()}, batch, D, V, c_.rms_eps, il, dump_,
                     mtp_in_, x_, n_rows);
  layer(il, segs, n_rows);
  for (const Segment& sg : segs) sg.state->advance(sg.n_tokens);

  draft_output_rows(batch, segs, n_rows, out_index_, hid_index_);
  const bool sub = m.head_sub.present();
  TERN_PROFILE(prof_head, "mtp.head", sub ? m.head_sub.bytes() : m.head.bytes());
  return sub ? head(m.head_sub, m.head_norm.data(), n_rows, true, &m.vocab) : head(m.head, m.head_norm.data(), n_rows, true);
}

}  // namespace tern::models::qwen35moe
