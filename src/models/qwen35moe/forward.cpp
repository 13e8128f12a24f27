#include "models/qwen35moe/forward.h"

#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "ops/norm.h"
#include "ops/split.h"
#include "quant/convert.h"

namespace tern::models::qwen35moe {

Forward::Forward(const Model& model, TensorDump dump, int64_t expert_slots)
    : model_(model),
      c_(model.config),
      attn_params_(c_.attention()),
      dn_params_(c_.deltanet()),
      moe_params_(c_.moe()),
      dump_(std::move(dump)),
      experts_(expert_slots > 0 ? std::make_unique<ExpertStore>(model, expert_slots)
                                : std::make_unique<ExpertStore>(model)) {}

// x += y over n_rows rows of n: a batch on all threads, a decode row on the calling thread (ops/split.h; each
// element's sum is the same either way).
static void add_rows(float* x, const float* y, int64_t n_rows, int64_t n) {
  ops::split::elements(n_rows * n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

void Forward::layer(int il, const std::vector<Segment>& segs, int64_t n_rows) {
  const LayerWeights& w = model_.weights.layers[il];
  const int64_t D = c_.n_embd;
  float* x = x_.data();
  float* cur = grow(cur_, n_rows * D);
  float* mix = grow(mix_, n_rows * D);

  ops::rms_norm(x, w.attn_norm.data(), cur, n_rows, D, c_.rms_eps);
  dump_("attn_norm", il, cur, {n_rows, D});
  if (w.kind == LayerKind::kAttention) attention_block(attn_params_, w.attn, il, segs, cur, n_rows, mix, attn_, dump_);
  else deltanet_block(dn_params_, w.dn, il, segs, cur, n_rows, mix, dn_, dump_);
  add_rows(x, mix, n_rows, D);
  dump_("attn_residual", il, x, {n_rows, D});

  ops::rms_norm(x, w.post_norm.data(), cur, n_rows, D, c_.rms_eps);
  dump_("attn_post_norm", il, cur, {n_rows, D});
  if (c_.dense()) ffn_block(w.ffn, il, cur, n_rows, mix, ffn_, dump_);
  else moe_block(moe_params_, w.moe, *experts_, il, cur, n_rows, mix, moe_, dump_);
  add_rows(x, mix, n_rows, D);
  dump_("l_out", il, x, {n_rows, D});
}

const std::vector<float>& Forward::run(std::vector<SeqInput>& batch) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  // Validate everything before touching any state.
  if (batch.empty()) fail("forward: empty batch");
  int64_t n_rows = 0, n_out = 0;
  for (const SeqInput& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (n == 0) fail("forward: a sequence has no new tokens");
    if (s.state->n_past() + n > s.state->n_ctx())
      fail("context overflow: %lld tokens in the sequence + %lld new > context size %lld (raise -c)",
           static_cast<long long>(s.state->n_past()), static_cast<long long>(n),
           static_cast<long long>(s.state->n_ctx()));
    for (int32_t t : s.tokens)
      if (t < 0 || t >= V) fail("token id %d is out of range (vocabulary size %lld)", t, static_cast<long long>(V));
    n_rows += n;
    n_out += s.all_logits ? n : 1;
  }
  std::vector<Segment> segs;
  float* x = grow(x_, n_rows * D);
  const Linear& emb = model_.weights.token_embd;
  int64_t row = 0;
  TERN_PROFILE(prof_embd, "embed", n_rows * emb.row_bytes);
  for (SeqInput& s : batch) {
    segs.push_back({s.state, row, static_cast<int64_t>(s.tokens.size())});
    for (int32_t t : s.tokens) quant::dequantize_row(emb.type, emb.data + emb.row_bytes * t, x + (row++) * D, D);
  }
  prof_embd.done();
  dump_("inp_embd", -1, x, {n_rows, D});

  for (int il = 0; il < c_.n_layer; ++il) layer(il, segs, n_rows);
  for (const Segment& sg : segs) sg.state->advance(sg.n_tokens);

  // Rows that need logits, then the final norm and LM head over just those.
  float* rows = grow(out_rows_, n_out * D);
  int64_t r = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Segment& sg = segs[i];
    const int64_t first = batch[i].all_logits ? 0 : sg.n_tokens - 1;
    for (int64_t t = first; t < sg.n_tokens; ++t) std::memcpy(rows + (r++) * D, x + (sg.row0 + t) * D, D * sizeof(float));
  }
  TERN_PROFILE(prof_head, "lm_head", model_.weights.output.bytes());
  ops::rms_norm(rows, model_.weights.output_norm.data(), rows, n_out, D, c_.rms_eps);
  dump_("result_norm", -1, rows, {n_out, D});
  logits_.resize(static_cast<size_t>(n_out * V));
  apply(model_.weights.output, rows, n_out, logits_.data());
  dump_("result_output", -1, logits_.data(), {n_out, V});
  return logits_;
}

}  // namespace tern::models::qwen35moe
