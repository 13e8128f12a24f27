// The parts of a forward every architecture shares around its layers: checking a batch before any state is touched,
// embedding its tokens into rows with one segment per sequence, and choosing which rows get logits and hidden states;
// and the same for an MTP draft block's batch (Model::forward_draft).
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/blocks/linear.h"
#include "models/dump.h"
#include "models/model.h"

namespace tern::models {

// The batch's row count. Throws Error (touching no state) for an empty batch, a sequence without tokens, a token id
// outside [0, n_vocab) or a sequence that would pass its context size.
int64_t check_batch(const std::vector<SeqInput>& batch, int64_t n_vocab);

// Rows x [n_rows, n_embd] = the embeddings of every sequence's new tokens, in batch order; begins each state's
// forward (SequenceState::begin_forward) and returns the segments.
std::vector<Segment> embed_batch(backend::Backend& be, const Linear& embeddings, std::vector<SeqInput>& batch,
                                 int64_t n_embd, float* x);

// The batch rows that get logits (all of a sequence's or its last) and those whose hidden state is kept.
void output_rows(const std::vector<SeqInput>& batch, const std::vector<Segment>& segs, std::vector<int64_t>& logits_rows,
                 std::vector<int64_t>& hidden_rows);

// The final norm before the LM head: the logits rows of x [n_rows, n_embd] (logits_rows) gathered and RMSNormed by
// norm_w into the returned rows [n_logits_rows, n_embd] (in s.rows). With hidden rows asked for, every row is
// normed first (the norm is row by row: the logits rows get the same bits) and the hidden rows copied to the host
// `hidden` [n_hidden_rows, n_embd]; else `hidden` is cleared.
struct OutputNormScratch {
  Scratch rows, normed, hidden;
};
float* norm_output_rows(backend::Backend& be, const float* x, int64_t n_rows, int64_t n_embd, const float* norm_w,
                        float eps, const std::vector<int64_t>& logits_rows, const std::vector<int64_t>& hidden_rows,
                        OutputNormScratch& s, std::vector<float>& hidden);

// A DeepSeek-V3-style MTP (NextN) block's weights around its decoder layer.
struct MtpInputWeights {
  const Linear* embed = nullptr;    // {n_embd, n_vocab}
  const Linear* eh_proj = nullptr;  // {2 * n_embd, n_embd}
  const float* enorm = nullptr;     // [n_embd]
  const float* hnorm = nullptr;     // [n_embd]
};
struct MtpInputScratch {
  Scratch e, h, cat;
  std::vector<float> h_host;  // the rows' hidden states, gathered for one upload (kept across draft steps)
};

// Checks a draft batch like check_batch (and each row's hidden state, the draft state and its context), touching no
// state; then writes the block's input rows x [n_rows, n_embd] = eh_proj([enorm(embed(token)) ; hnorm(hidden)]),
// begins each draft state's forward and returns one segment per sequence over its draft state. Dumps mtp_enorm,
// mtp_hnorm and mtp_eh_proj at layer index `il`. `n_rows` gets the batch's row count.
std::vector<Segment> mtp_input_rows(backend::Backend& be, const MtpInputWeights& w, std::vector<DraftInput>& batch,
                                    int64_t n_embd, int64_t n_vocab, float eps, int il, const TensorDump& dump,
                                    MtpInputScratch& s, Scratch& x, int64_t& n_rows);

// The draft rows that get logits (all of a sequence's or its last); every row's hidden state is kept (a chained
// draft's input).
void draft_output_rows(const std::vector<DraftInput>& batch, const std::vector<Segment>& segs, int64_t n_rows,
                       std::vector<int64_t>& logits_rows, std::vector<int64_t>& hidden_rows);

}  // namespace tern::models
