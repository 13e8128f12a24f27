#include "runtime/decode_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "runtime/sampler.h"

namespace tern::runtime {

namespace {

using clock_t_ = std::chrono::steady_clock;

double seconds_since(clock_t_::time_point t0) {
  return std::chrono::duration<double>(clock_t_::now() - t0).count();
}

void ema(double& v, double x) { v = v > 0 ? 0.8 * v + 0.2 * x : x; }

// Probability of the top token of a logits row (softmax), for --draft-min-p.
constexpr double kMargin = 1.03;       // drafting is chosen when it promises at least 3% more tokens per second
constexpr size_t kProbeRows = 4;      // a probe after idle steps writes only the latest this many rows

}  // namespace

DecodeLoop::DecodeLoop(models::Model& model, const DraftOptions& o)
    : model_(model), o_(o), D_(model.info().n_embd), V_(model.info().n_vocab) {
  if (o_.max < 0) fail("--draft must be >= 0 (got %d)", o_.max);
  if (!(o_.min_p >= 0.0f && o_.min_p <= 1.0f)) fail("--draft-min-p must be in [0, 1] (got %g)", o_.min_p);
  if (o_.max > 0 && !model_.can_draft()) o_.max = 0;
  t_verify_.assign(static_cast<size_t>(o_.max) + 1, 0.0);
}

DecodeLoop::Track& DecodeLoop::track(models::SequenceState* st) {
  Track& t = tracks_[st];
  // New, reset, restored (even to the very position the track was at: a server slot that ran a cancelled request
  // and now resumes another from the prefix cache), or run outside the loop: start afresh.
  if (t.state != st || t.n_past != st->n_past() || t.epoch != st->epoch()) {
    t = Track{};
    t.state = st;
    t.n_past = st->n_past();
    t.epoch = st->epoch();
    t.accept_ema = accept_prior_;
    t.probe_gap = gap_prior_;
    // A restored state brings its draft rows along (all true rows); the hidden state of its last position is not
    // known, so the next row pairs with zeros (one row of context fewer for the draft, nothing else).
    if (models::SequenceState* d = st->draft()) t.draft_true = d->n_past();
  }
  // Checked every step: a new state may sit where a destroyed one was (tracks are keyed by address).
  if (drafting() && st->checkpoint_capacity() < o_.max + 1) st->set_checkpoint_capacity(*st->backend(), o_.max + 1);
  if (drafting() && !st->draft()) fail("decode loop: a sequence state without a draft state (made for another model?)");
  return t;
}

int DecodeLoop::choose_k(const Track& s) const {
  const int64_t room_trunk = s.state->n_ctx() - s.state->n_past() - 1;
  const int64_t room_draft = s.state->n_ctx() - s.draft_true - static_cast<int64_t>(s.owed_tok.size()) - 1;
  const int cap = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>({o_.max, room_trunk, room_draft + 1})));
  if (cap == 0) return 0;
  if (!o_.adaptive) return cap;
  // Expected tokens per step at per-token acceptance a with k drafts: 1 + a + ... + a^k.
  const double a = std::clamp(s.accept_ema, 0.0, 0.999);
  if (t_verify_[0] <= 0) return 0;    // measure a plain decode step first
  if (t_draft_ <= 0) return 1;         // then the cheapest drafting one
  // A length not measured yet is priced on the line through the plain step and the longest measured verify
  // (+10% a token when none is: the bandwidth-bound guess).
  int m = 0;
  for (int k = 1; k <= o_.max; ++k)
    if (t_verify_[k] > 0) m = k;
  const double slope = m > 0 ? std::max(0.0, (t_verify_[m] - t_verify_[0]) / m) : 0.1 * t_verify_[0];
  int best = 0;
  double best_rate = 0;
  for (int k = 0; k <= cap; ++k) {
    const double tv = t_verify_[k] > 0 ? t_verify_[k] : t_verify_[0] + slope * k;
    const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    const double rate = tokens / (tv + k * t_draft_);
    // Drafting must beat the plain step by kMargin: a gain inside the timing noise is not worth its risk.
    if (rate > best_rate * (k > 0 && best == 0 ? kMargin : 1.0)) best_rate = rate, best = k;
  }
  return best;
}

void DecodeLoop::step(std::vector<DecodeSeq*>& seqs, const Pick& pick) {
  batch_.clear();
  std::vector<size_t> which;  // batch row -> index in seqs
  std::vector<Track*> tr;     // batch row -> its track
  for (size_t i = 0; i < seqs.size(); ++i) {
    DecodeSeq& s = *seqs[i];
    if (s.feed.empty()) continue;
    s.stopped = false;
    Track& t = track(s.state);
    models::SeqInput in;
    in.state = s.state;
    in.tokens = s.feed;
    if (!s.sample) t.drafts.clear();
    in.tokens.insert(in.tokens.end(), t.drafts.begin(), t.drafts.end());
    in.all_logits = !t.drafts.empty();
    in.hidden = drafting();
    batch_.push_back(std::move(in));
    which.push_back(i);
    tr.push_back(&t);
  }
  if (batch_.empty()) return;
  std::vector<int64_t> p0(batch_.size());
  for (size_t b = 0; b < batch_.size(); ++b) p0[b] = batch_[b].state->n_past();

  // Across ranks each rank gets its own vocabulary columns and picks reduce candidates (runtime::LogitsRow).
  models::LocalLogits local(model_);
  const auto t0 = clock_t_::now();
  const std::vector<float>& logits = model_.forward(batch_);
  const models::LogitsShare sh = model_.logits_share();
  const int64_t W = sh.count;  // columns per row
  const double dt = seconds_since(t0);
  ++stats_.forwards;
  if (batch_.size() == 1 && seqs[which[0]]->sample && seqs[which[0]]->feed.size() == 1) {  // a decode step
    const size_t k = tr[0]->drafts.size();
    if (k < t_verify_.size()) ema(t_verify_[k], dt);
  }
  if (o_.comm && o_.comm->size() > 1 && o_.adaptive && drafting()) {
    // The costs every choice of this step reads (choose_k here and in draft_next): rank 0's, on every rank.
    std::vector<double> costs(t_verify_);
    costs.push_back(t_draft_);
    o_.comm->broadcast(costs.data(), costs.size() * sizeof(double), 0);
    std::copy(costs.begin(), costs.end() - 1, t_verify_.begin());
    t_draft_ = costs.back();
  }
  const std::vector<float>& hidden = model_.hidden();

  std::vector<Track*> todo;
  std::vector<int32_t> last;
  int64_t row = 0, hrow = 0;
  for (size_t b = 0; b < batch_.size(); ++b) {
    DecodeSeq& s = *seqs[which[b]];
    Track& t = *tr[b];
    const models::SeqInput& in = batch_[b];
    const int64_t n_fed = static_cast<int64_t>(in.tokens.size());
    const int64_t n_rows = in.all_logits ? n_fed : 1;
    int64_t kept = n_fed;
    int32_t taken = -1;
    if (s.sample) {
      const int k = static_cast<int>(t.drafts.size());
      const float* rows = logits.data() + (row + n_rows - 1 - k) * W;
      int a = 0;
      for (int j = 0; j <= k; ++j) {
        const int32_t d = j < k ? t.drafts[j] : -1;
        s.n_past = p0[b] + static_cast<int64_t>(s.feed.size()) + j;
        taken = pick(which[b], LogitsRow{rows + static_cast<int64_t>(j) * W, V_, sh.first, W, sh.comm}, d);
        ++stats_.tokens;
        if (d >= 0 && taken == d) ++a;
        if (taken != d || s.stopped) break;
      }
      kept = static_cast<int64_t>(s.feed.size()) + a;
      ++stats_.steps;
      stats_.drafted += k;
      stats_.accepted += a;
      if (k > 0) ema(t.accept_ema, static_cast<double>(a) / (a < k ? a + 1 : a));
      // After a probe: probe again soon if drafting now pays; otherwise back off (to 256 steps), whether the probe
      // took nothing or took tokens at an acceptance that still does not pay for the verify and draft costs.
      if (t.probing) t.probe_gap = choose_k(t) > 0 ? 16 : std::min(256, 2 * t.probe_gap);
      accept_prior_ = t.accept_ema;
      gap_prior_ = t.probe_gap;
      if (kept < n_fed) s.state->rollback(p0[b] + kept);
    }
    if (drafting()) {
      const float* H = hidden.data() + hrow * D_;
      models::SequenceState* ds = s.state->draft();
      if (ds->n_past() > t.draft_true) ds->rollback(t.draft_true);  // the chained (speculative) rows
      for (int64_t i = 0; i < kept; ++i) {
        const int64_t pos = p0[b] + i;
        if (pos == 0) continue;  // the first token of a sequence has no row
        if (i == 0 && t.row_ahead) continue;  // written by the last draft forward, as the chain's start
        t.owed_tok.push_back(in.tokens[static_cast<size_t>(i)]);
        if (i == 0 && t.h_prev.empty()) {  // after a prefix-cache restore the hidden state is not kept: zeros
          t.owed_h.resize(t.owed_h.size() + static_cast<size_t>(D_), 0.0f);
          continue;
        }
        const float* h = i == 0 ? t.h_prev.data() : H + (i - 1) * D_;
        t.owed_h.insert(t.owed_h.end(), h, h + D_);
      }
      t.row_ahead = false;
      t.h_prev.assign(H + (kept - 1) * D_, H + kept * D_);
      hrow += n_fed;
      if (s.sample && !s.stopped && taken >= 0) {
        todo.push_back(&t);
        last.push_back(taken);
      }
    }
    t.drafts.clear();
    row += n_rows;
  }
  if (!todo.empty()) draft_next(todo, last);
  for (Track* t : tr) t->n_past = t->state->n_past();
}

void DecodeLoop::draft_next(std::vector<Track*>& todo, const std::vector<int32_t>& last) {
  // First draft forward: every drafting sequence's owed rows plus (last sampled token, hidden of the last kept
  // position); a sequence at k = 0 writes nothing and keeps only its latest kProbeRows rows for its next probe.
  dbatch_.clear();
  std::vector<Track*> chain;  // per draft row: its sequence
  std::vector<int> want;
  for (size_t i = 0; i < todo.size(); ++i) {
    Track& s = *todo[i];
    s.k = choose_k(s);
    s.probing = false;
    if (s.k == 0) {
      if (++s.idle >= s.probe_gap && o_.adaptive) s.k = 1, s.idle = 0, s.probing = true;
    } else {
      s.idle = 0;
    }
    models::DraftInput in;
    in.state = s.state;
    if (s.k == 0 || s.probing) {
      // Idle (or a probe after idle steps): only the latest kProbeRows rows are kept for the next probe to write.
      // Writing every row would run the draft block over every token, a cost drafting is off to avoid (each row
      // routes to its own experts); the draft's context just has a gap there.
      if (s.owed_tok.size() > kProbeRows) {
        const size_t drop = s.owed_tok.size() - kProbeRows;
        s.owed_tok.erase(s.owed_tok.begin(), s.owed_tok.begin() + static_cast<std::ptrdiff_t>(drop));
        s.owed_h.erase(s.owed_h.begin(), s.owed_h.begin() + static_cast<std::ptrdiff_t>(drop * D_));
      }
      if (s.k == 0) continue;
    }
    in.tokens = std::move(s.owed_tok);
    in.hidden = std::move(s.owed_h);
    in.tokens.push_back(last[i]);
    in.hidden.insert(in.hidden.end(), s.h_prev.begin(), s.h_prev.end());
    s.owed_tok.clear();
    s.owed_h.clear();
    dbatch_.push_back(std::move(in));
    chain.push_back(&s);
    want.push_back(s.k);
  }
  if (dbatch_.empty()) return;
  models::LocalLogits local(model_);
  auto t0 = clock_t_::now();
  const std::vector<float>* lg = &model_.forward_draft(dbatch_);
  // The draft's top token of row i (and whether it clears --draft-min-p); every rank gets the same answer.
  auto top = [&](int64_t i, bool& sure) {
    const models::LogitsShare sh = model_.logits_share();
    const LogitsRow r{lg->data() + i * sh.count, V_, sh.first, sh.count, sh.comm};
    float v = 0;
    const int32_t d = argmax(r, &v);
    sure = !(o_.min_p > 0) || !(top_prob(r, v) < o_.min_p);
    return d;
  };
  double dt = seconds_since(t0);
  std::vector<std::vector<float>> g(dbatch_.size());
  {
    const std::vector<float>& h = model_.hidden();
    int64_t hrow = 0;
    for (size_t b = 0; b < dbatch_.size(); ++b) {
      const int64_t n = static_cast<int64_t>(dbatch_[b].tokens.size());
      g[b].assign(h.begin() + (hrow + n - 1) * D_, h.begin() + (hrow + n) * D_);
      hrow += n;
    }
  }
  // Take the first drafted token of each chaining sequence.
  std::vector<int32_t> next(dbatch_.size(), -1);
  for (size_t b = 0; b < dbatch_.size(); ++b) {
    Track* s = chain[b];
    s->draft_true = s->state->draft()->n_past();  // every row of this forward is a true one
    s->row_ahead = true;
    bool sure = true;
    const int32_t d = top(static_cast<int64_t>(b), sure);
    if (!sure) continue;
    s->drafts.push_back(d);
    next[b] = d;
  }
  // Chain: each drafted token with the draft block's own output hidden state.
  for (int step = 1;; ++step) {
    dbatch_.clear();
    std::vector<size_t> from;
    for (size_t b = 0; b < chain.size(); ++b) {
      Track* s = chain[b];
      if (next[b] < 0 || static_cast<int>(s->drafts.size()) >= want[b]) continue;
      models::DraftInput in;
      in.state = s->state;
      in.tokens = {next[b]};
      in.hidden = g[b];
      dbatch_.push_back(std::move(in));
      from.push_back(b);
    }
    if (dbatch_.empty()) break;
    t0 = clock_t_::now();
    lg = &model_.forward_draft(dbatch_);
    const double dts = seconds_since(t0);
    dt = std::max(dt, dts);
    ema(t_draft_, dts);
    const std::vector<float>& h = model_.hidden();
    for (size_t i = 0; i < from.size(); ++i) {
      const size_t b = from[i];
      bool sure = true;
      const int32_t d = top(static_cast<int64_t>(i), sure);
      g[b].assign(h.begin() + static_cast<int64_t>(i) * D_, h.begin() + static_cast<int64_t>(i + 1) * D_);
      if (!sure) {
        next[b] = -1;
        continue;
      }
      chain[b]->drafts.push_back(d);
      next[b] = d;
    }
  }
  if (t_draft_ <= 0) t_draft_ = dt;  // a single-token chain: the first forward is the only measurement
}

}  // namespace tern::runtime
