#include "models/batch_io.h"

#include <algorithm>

#include "core/error.h"
#include "models/sequence_state.h"

namespace tern::models {

int64_t check_batch(const std::vector<SeqInput>& batch, int64_t n_vocab) {
  if (batch.empty()) fail("forward: empty batch");
  int64_t n_rows = 0;
  for (const SeqInput& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (n == 0) fail("forward: a sequence has no new tokens");
    if (s.state->n_past() + n > s.state->n_ctx())
      fail("context overflow: %lld tokens in the sequence + %lld new > context size %lld (raise -c)",
           static_cast<long long>(s.state->n_past()), static_cast<long long>(n),
           static_cast<long long>(s.state->n_ctx()));
    for (int32_t t : s.tokens)
      if (t < 0 || t >= n_vocab)
        fail("token id %d is out of range (vocabulary size %lld)", t, static_cast<long long>(n_vocab));
    n_rows += n;
  }
  return n_rows;
}

std::vector<Segment> embed_batch(backend::Backend& be, const Linear& embeddings, std::vector<SeqInput>& batch,
                                 int64_t n_embd, float* x) {
  std::vector<Segment> segs;
  int64_t row = 0;
  for (SeqInput& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    s.state->begin_forward(n);
    segs.push_back({s.state, row, n});
    be.get_rows(embeddings, s.tokens.data(), n, x + row * n_embd);
    row += n;
  }
  return segs;
}

namespace {

// Every row of a sequence that asks for all logits, else its last.
template <class Input>
void logits_rows_of(const std::vector<Input>& batch, const std::vector<Segment>& segs, std::vector<int64_t>& rows) {
  rows.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const Segment& sg = segs[i];
    for (int64_t t = batch[i].all_logits ? 0 : sg.n_tokens - 1; t < sg.n_tokens; ++t) rows.push_back(sg.row0 + t);
  }
}

}  // namespace

void output_rows(const std::vector<SeqInput>& batch, const std::vector<Segment>& segs, std::vector<int64_t>& logits_rows,
                 std::vector<int64_t>& hidden_rows) {
  logits_rows_of(batch, segs, logits_rows);
  hidden_rows.clear();
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].hidden)
      for (int64_t t = 0; t < segs[i].n_tokens; ++t) hidden_rows.push_back(segs[i].row0 + t);
}

float* norm_output_rows(backend::Backend& be, const float* x, int64_t n_rows, int64_t n_embd, const float* norm_w,
                        float eps, const std::vector<int64_t>& logits_rows, const std::vector<int64_t>& hidden_rows,
                        OutputNormScratch& s, std::vector<float>& hidden) {
  const int64_t D = n_embd, n_out = static_cast<int64_t>(logits_rows.size());
  float* rows = s.rows.grow<float>(be, n_out * D);
  if (hidden_rows.empty()) {
    be.gather_rows(x, logits_rows.data(), n_out, D, rows);
    be.rms_norm(rows, norm_w, rows, n_out, D, eps);
    hidden.clear();
    return rows;
  }
  float* nx = s.normed.grow<float>(be, n_rows * D);
  be.rms_norm(x, norm_w, nx, n_rows, D, eps);
  be.gather_rows(nx, logits_rows.data(), n_out, D, rows);
  const int64_t n_hid = static_cast<int64_t>(hidden_rows.size());
  float* hid = s.hidden.grow<float>(be, n_hid * D);
  be.gather_rows(nx, hidden_rows.data(), n_hid, D, hid);
  hidden.resize(static_cast<size_t>(n_hid * D));
  s.hidden.read(hidden.data(), hidden.size() * sizeof(float));
  return rows;
}

std::vector<Segment> mtp_input_rows(backend::Backend& be, const MtpInputWeights& w, std::vector<DraftInput>& batch,
                                    int64_t n_embd, int64_t n_vocab, float eps, int il, const TensorDump& dump,
                                    MtpInputScratch& s, Scratch& x, int64_t& n_rows) {
  const int64_t D = n_embd;
  if (batch.empty()) fail("draft forward: empty batch");
  n_rows = 0;
  for (const DraftInput& d : batch) {
    const int64_t n = static_cast<int64_t>(d.tokens.size());
    if (n == 0) fail("draft forward: a sequence has no rows");
    if (static_cast<int64_t>(d.hidden.size()) != n * D)
      fail("draft forward: %lld tokens but %zu hidden values (expected %lld)", static_cast<long long>(n),
           d.hidden.size(), static_cast<long long>(n * D));
    SequenceState* ds = d.state->draft();
    if (!ds) fail("draft forward: the sequence state has no draft state (made for another model?)");
    if (ds->n_past() + n > ds->n_ctx())
      fail("context overflow (draft): %lld rows + %lld new > context size %lld", static_cast<long long>(ds->n_past()),
           static_cast<long long>(n), static_cast<long long>(ds->n_ctx()));
    for (int32_t t : d.tokens)
      if (t < 0 || t >= n_vocab) fail("token id %d is out of range (vocabulary size %lld)", t, static_cast<long long>(n_vocab));
    n_rows += n;
  }
  std::vector<Segment> segs;
  float* e = s.e.grow<float>(be, n_rows * D);
  std::vector<float>& h_host = s.h_host;
  h_host.resize(static_cast<size_t>(n_rows * D));
  int64_t row = 0;
  for (DraftInput& d : batch) {
    const int64_t n = static_cast<int64_t>(d.tokens.size());
    d.state->draft()->begin_forward(n);
    segs.push_back({d.state->draft(), row, n});
    be.get_rows(*w.embed, d.tokens.data(), n, e + row * D);
    std::copy(d.hidden.begin(), d.hidden.end(), h_host.begin() + row * D);
    row += n;
  }
  float* h = s.h.upload(be, h_host.data(), n_rows * D);
  be.rms_norm(e, w.enorm, e, n_rows, D, eps);
  be.rms_norm(h, w.hnorm, h, n_rows, D, eps);
  dump("mtp_enorm", il, e, {n_rows, D});
  dump("mtp_hnorm", il, h, {n_rows, D});
  float* cat = s.cat.grow<float>(be, n_rows * 2 * D);
  be.concat_rows(e, D, h, D, n_rows, cat);
  float* xr = x.grow<float>(be, n_rows * D);
  be.matmul(*w.eh_proj, cat, n_rows, xr);
  dump("mtp_eh_proj", il, xr, {n_rows, D});
  return segs;
}

void draft_output_rows(const std::vector<DraftInput>& batch, const std::vector<Segment>& segs, int64_t n_rows,
                       std::vector<int64_t>& logits_rows, std::vector<int64_t>& hidden_rows) {
  logits_rows_of(batch, segs, logits_rows);
  hidden_rows.clear();
  for (int64_t r = 0; r < n_rows; ++r) hidden_rows.push_back(r);
}

}  // namespace tern::models
