#include "models/glm_dsa/forward.h"

#include "core/error.h"
#include "core/log.h"
#include "core/profile.h"
#include "models/batch_io.h"
#include "models/sequence_state.h"

namespace tern::models::glm_dsa {

Forward::Forward(const Model& model, TensorDump dump, int64_t expert_slots)
    : model_(model),
      be_(*model.backend),
      c_(model.config),
      mla_params_(c_.mla()),
      moe_params_(c_.moe()),
      dump_(std::move(dump)),
      experts_(expert_slots > 0 ? std::make_unique<ExpertStore>(model.expert_layout(), expert_slots)
                                : std::make_unique<ExpertStore>(model.expert_layout())) {
  const char* form = mla_params_.form == MlaForm::kAbsorbed   ? "the absorbed form for every segment (forced)"
                     : mla_params_.form == MlaForm::kExpanded ? "the expanded form wherever every key is attended (forced)"
                                                              : "the expanded form for prefill segments of >= 64 tokens "
                                                                "that attend every key and whose past is short "
                                                                "enough to expand again (measured rule), the absorbed "
                                                                "form otherwise";
  log::info("%s: MLA attention: %s", model.file->name().c_str(), form);
}

void Forward::layer(int il, const std::vector<Segment>& segs, int64_t n_rows) {
  const LayerWeights& w = model_.weights.layers[static_cast<size_t>(il)];
  const int64_t D = c_.n_embd;
  float* x = x_.grow<float>(be_, n_rows * D);
  float* cur = cur_.grow<float>(be_, n_rows * D);
  float* mix = mix_.grow<float>(be_, n_rows * D);

  be_.rms_norm(x, w.attn_norm.data(), cur, n_rows, D, c_.rms_eps);
  dump_("attn_norm", il, cur, {n_rows, D});
  mla_block(be_, mla_params_, w.mla, il, segs, cur, n_rows, mix, mla_, dump_);
  be_.add(x, mix, n_rows * D);
  dump_("ffn_inp", il, x, {n_rows, D});

  be_.rms_norm(x, w.ffn_norm.data(), cur, n_rows, D, c_.rms_eps);
  dump_("ffn_norm", il, cur, {n_rows, D});
  if (c_.dense_block(il)) ffn_block(be_, w.ffn, il, cur, n_rows, mix, ffn_, dump_);
  else moe_block(be_, moe_params_, w.moe, *experts_, il, cur, n_rows, mix, moe_, dump_);
  be_.add(x, mix, n_rows * D);
  dump_("l_out", il, x, {n_rows, D});
}

const std::vector<float>& Forward::run(std::vector<SeqInput>& batch) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  const int64_t n_rows = check_batch(batch, V);
  float* x = x_.grow<float>(be_, n_rows * D);
  TERN_PROFILE(prof_embd, "embed", n_rows * model_.weights.token_embd.row_bytes);
  const std::vector<Segment> segs = embed_batch(be_, model_.weights.token_embd, batch, D, x);
  prof_embd.done();
  dump_("inp_embd", -1, x, {n_rows, D});

  for (int il = 0; il < c_.n_layer; ++il) layer(il, segs, n_rows);
  for (const Segment& sg : segs) sg.state->advance(sg.n_tokens);

  output_rows(batch, segs, out_index_, hid_index_);
  TERN_PROFILE(prof_head, "lm_head", model_.weights.output.bytes());
  return head(model_.weights.output, model_.weights.output_norm.data(), n_rows);
}

const std::vector<float>& Forward::head(const Linear& w, const float* norm_w, int64_t n_rows) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  const int64_t n_out = static_cast<int64_t>(out_index_.size());
  const float* x = x_.grow<float>(be_, n_rows * D);
  const float* rows = norm_output_rows(be_, x, n_rows, D, norm_w, c_.rms_eps, out_index_, hid_index_, out_norm_, hidden_);
  dump_("result_norm", -1, rows, {n_out, D});
  float* logits = logits_dev_.grow<float>(be_, n_out * V);
  be_.matmul(w, rows, n_out, logits);
  dump_("result_output", -1, logits, {n_out, V});
  logits_.resize(static_cast<size_t>(n_out * V));
  logits_dev_.read(logits_.data(), logits_.size() * sizeof(float));
  return logits_;
}

// The MTP block (contract section 10, NextN): row r of a sequence pairs token t+1 with the hidden state h_t (the
// trunk's final-normed row, or this block's own normed output for a chained draft); x = eh_proj([enorm(embed(t+1)),
// hnorm(h_t)]) runs through the block's decoder layer over the sequence's draft state (its own latent cache and
// indexer keys, its own positions), then shared_head_norm and the head. Every row's normed output is kept as hidden().
const std::vector<float>& Forward::run_draft(std::vector<DraftInput>& batch) {
  const int64_t D = c_.n_embd, V = c_.n_vocab;
  if (!model_.config.mtp_drafts())
    fail(model_.weights.has_mtp ? "this model's MTP block cannot draft (it has no indexer of its own)"
                                : "this model has no MTP block to draft with");
  const MtpWeights& m = model_.weights.mtp;
  const int il = static_cast<int>(c_.n_layer);
  int64_t n_rows = 0;
  const std::vector<Segment> segs =
      mtp_input_rows(be_, {&m.embed, &m.eh_proj, m.enorm.data(), m.hnorm.data()}, batch, D, V, c_.rms_eps, il, dump_,
                     mtp_in_, x_, n_rows);
  layer(il, segs, n_rows);
  for (const Segment& sg : segs) sg.state->advance(sg.n_tokens);

  draft_output_rows(batch, segs, n_rows, out_index_, hid_index_);
  TERN_PROFILE(prof_head, "mtp.head", m.head.bytes());
  return head(m.head, m.head_norm.data(), n_rows);
}

}  // namespace tern::models::glm_dsa
