// The one decode loop (tern run, tern chat, the server's scheduler, tern bench): per step, every sequence feeds
// its new tokens (a prompt chunk, or the token it last sampled) plus the tokens its model's draft block proposed;
// one forward verifies them all; each sampling sequence takes tokens row by row while they agree with the draft
// (the caller samples each row as it would without a draft; a draw equal to the draft token keeps it), the state
// steps back to the tokens kept, and the draft block proposes the next ones. Without a draft block (or with
// drafting off) a step is one forward of the new tokens and one sampled row, as before.
//
// Drafting (models with an MTP block): the draft block's state holds, for every position p >= 1 the trunk has
// kept, a row (token p, trunk hidden state at p - 1). After a verify, the rows of the kept tokens are added with
// the trunk's true hidden states, then the chain starts from (last sampled token, hidden state of the last kept
// position) and feeds each drafted token with the draft block's own output hidden state. Drafted rows past the
// true ones are rolled back before the next step.
//
// The draft length adapts: the loop measures the time of a trunk forward of 1 + k tokens and of a draft step, and
// the acceptance rate per drafted token (a moving average), and each step drafts the k (0..max) that maximises the
// expected tokens per second, k = 0 included (leaving k = 0 only for a 3% gain); at k = 0 it probes k = 1 every 16
// steps, backing off to 256 while probes find drafting unprofitable, so a rising acceptance is seen. Greedy output is identical with drafting and without (the verify rows equal one-by-one decode bit for
// bit; tests/runtime); so is sampled output for a given seed, since the caller draws each kept token once, as
// without drafting (for a deterministic draft this is the standard speculative-sampling rule: Sampler::sample).
#pragma once
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "models/model.h"
#include "runtime/sampler.h"

namespace tern::runtime {

struct DraftOptions {
  int max = 0;           // most tokens drafted per step (0: no drafting)
  float min_p = 0.0f;    // a chain stops early when the draft's top token has probability below this
  bool adaptive = true;  // pick the length per step from measured acceptance and costs (else always `max`)
  // Across ranks (the model split over comm's ranks): every rank must run the same forwards, so the adaptive length
  // is chosen from rank 0's measured costs (broadcast each step; acceptance is the same on every rank).
  Comm* comm = nullptr;
};

struct DraftStats {
  int64_t steps = 0;      // verify steps of sampling sequences
  int64_t forwards = 0;   // trunk forwards
  int64_t drafted = 0;    // draft tokens offered to verification
  int64_t accepted = 0;   // of those, taken
  int64_t tokens = 0;     // tokens taken by sampling sequences (accepted drafts + one sampled per step)
  double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0.0; }
  double tokens_per_step() const { return steps ? static_cast<double>(tokens) / steps : 0.0; }
};

// One sequence's part of a step. The loop keeps its own bookkeeping per state (drafts, hidden states, acceptance)
// and starts it afresh whenever the state's n_past is not where the loop left it (a reset, a prefix-cache restore,
// a forward run outside the loop).
struct DecodeSeq {
  models::SequenceState* state = nullptr;
  std::vector<int32_t> feed;  // new tokens: a prompt chunk, or the one token to continue from
  bool sample = false;        // the caller samples this step (decoding, or the prompt's last chunk)
  bool stopped = false;       // set by the caller inside pick() to take no further token this step
  int64_t n_past = 0;         // set before each pick(): the tokens the state holds once the row's drafts before it
                              // are kept (what state->n_past() is after the step if the picked token is the last)
};

class DecodeLoop {
 public:
  DecodeLoop(models::Model& model, const DraftOptions& o);
  // Whether this loop drafts (the model has a draft block and max > 0).
  bool drafting() const { return o_.max > 0; }
  int max_draft() const { return o_.max; }
  // Drops the bookkeeping of a state about to be destroyed.
  void forget(const models::SequenceState* st) { tracks_.erase(st); }

  // The caller's choice for one row of one sequence: `logits` is the row (across ranks, this rank's columns of it:
  // sample it with Sampler::sample(const LogitsRow&) or argmax(const LogitsRow&), which every rank calls alike),
  // `draft` the token the draft proposes next (-1: none). Returns the token the sequence takes (drawn from the row
  // as without drafting), having emitted it; sets s.stopped to take no further token. A token equal to `draft`
  // accepts it.
  using Pick = std::function<int32_t(size_t seq, const LogitsRow& logits, int32_t draft)>;

  // One step over all sequences (see the file comment). Sequences with an empty feed are skipped. Throws what the
  // forward throws (states untouched).
  void step(std::vector<DecodeSeq*>& seqs, const Pick& pick);

  const DraftStats& stats() const { return stats_; }
  // The tokens proposed for a sequence's next step (empty: none).
  std::vector<int32_t> drafts(const models::SequenceState* st) const {
    auto it = tracks_.find(st);
    return it == tracks_.end() ? std::vector<int32_t>{} : it->second.drafts;
  }

 private:
  struct Track {
    models::SequenceState* state = nullptr;
    int64_t n_past = -1;            // where the loop left the state
    uint64_t epoch = 0;             // the state's epoch() then (a reset or restore since means a new sequence)
    std::vector<int32_t> drafts;    // proposed after the last sampled token, verified with the next feed
    std::vector<float> h_prev;      // trunk hidden state of the last kept position (empty: none yet)
    std::vector<int32_t> owed_tok;  // kept tokens whose draft-block rows are not written yet
    std::vector<float> owed_h;      // ... and the hidden states they pair with
    int64_t draft_true = 0;         // rows of the draft state made from true hidden states
    int k = 0;                      // draft length of this step
    int idle = 0;                   // steps at k = 0 since drafting was last tried
    int probe_gap = 16;             // steps between probes at k = 0: doubles while probes take nothing (to 256)
    bool probing = false;           // this step's drafts are a probe
    bool row_ahead = false;         // the draft state already holds the row of the next feed's first token
    double accept_ema = 0.7;        // per-token acceptance, moving average
  };
  Track& track(models::SequenceState* st);
  void draft_next(std::vector<Track*>& todo, const std::vector<int32_t>& last);
  int choose_k(const Track& t) const;

  models::Model& model_;
  DraftOptions o_;
  int64_t D_, V_;
  DraftStats stats_;
  std::vector<double> t_verify_;  // [1 + max] seconds of a trunk forward of 1 + k tokens (moving average, 0: unknown)
  double t_draft_ = 0;            // seconds of one draft-block step
  double accept_prior_ = 0.7;     // a new sequence's acceptance estimate: the last one measured
  int gap_prior_ = 16;            // ... and its probe gap
  std::unordered_map<const models::SequenceState*, Track> tracks_;
  std::vector<models::SeqInput> batch_;
  std::vector<models::DraftInput> dbatch_;
};

}  // namespace tern::runtime
