#include "serve/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "runtime/generate.h"

namespace tern::serve {

using models::SeqInput;
using models::SequenceState;

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kNone: return "null";
    case Finish::kStop: return "stop";
    case Finish::kLength: return "length";
    case Finish::kCancelled: return "cancelled";
    case Finish::kError: return "error";
  }
  return "?";
}

// ---- Completion (client side) ----

bool Completion::wait(std::string* out, std::chrono::milliseconds timeout, std::vector<TokenLogprob>* logprobs) {
  std::unique_lock lk(m_);
  cv_.wait_for(lk, timeout, [&] { return !pending_.empty() || !pending_logprobs_.empty() || finish_ != Finish::kNone; });
  out->append(pending_);
  pending_.clear();
  if (logprobs) logprobs->insert(logprobs->end(), pending_logprobs_.begin(), pending_logprobs_.end());
  pending_logprobs_.clear();
  return finish_ != Finish::kNone;
}

Finish Completion::finish() const {
  std::lock_guard lk(m_);
  return finish_;
}

void Completion::post(const std::string& text, Finish f, const std::string& error) {
  {
    std::lock_guard lk(m_);
    pending_ += text;
    if (f != Finish::kNone) {
      finish_ = f;
      error_ = error;
    }
  }
  cv_.notify_all();
}

// ---- Scheduler ----

struct Scheduler::Job {
  Job(GenRequest r, const text::Tokenizer& tok)
      : req(std::move(r)), c(std::make_shared<Completion>()), sampler(req.sampling), text(tok, req.stop) {}
  GenRequest req;
  std::shared_ptr<Completion> c;
  runtime::Sampler sampler;
  TextStream text;
  uint64_t order = 0;     // admission order: prompt chunks go first-come first-served
  int slot = -1;
  int64_t n_fed = 0;      // prompt tokens processed
  int32_t next = -1;      // sampled token to feed at the next step (decoding)
  bool done = false;
  bool cancel_seen = false;  // the request was cancelled (seen before a step; across ranks, the leader's broadcast)
  bool fresh = false;     // just got a sequence; start() has not run
  int64_t kv_rows = 0;    // KV rows reserved while it runs (SchedulerOptions::kv_tokens)
  bool kv_waited = false; // counted once in kv_waits
  std::vector<int64_t> points;  // prompt positions to snapshot at (ends of messages, end of prompt), ascending
  std::unique_ptr<TokenConstraint> json;  // constrained decoding (json_object, a forced choice); null: free
  bool prefilling() const { return n_fed < static_cast<int64_t>(req.prompt.size()); }
};

Scheduler::Scheduler(runtime::Engine& engine, const text::Tokenizer& tok, const SchedulerOptions& o)
    : engine_(engine), tok_(tok), o_(o), n_ctx_(o.n_ctx > 0 ? o.n_ctx : engine.n_ctx()),
      cache_(o.cache_bytes) {
  if (o_.parallel < 1) fail("--parallel must be >= 1 (got %d)", o_.parallel);
  if (o_.batch < 1) fail("--batch must be >= 1 (got %d)", o_.batch);
  if (o_.max_queue < 0) fail("--max-queue must be >= 0 (got %d)", o_.max_queue);
  if (o_.kv_tokens < 0) fail("internal: kv_tokens must be >= 0 (got %lld)", static_cast<long long>(o_.kv_tokens));
  stats_.kv_tokens = o_.kv_tokens;
  eog_ = runtime::end_of_generation_ids(tok);
  const int32_t V = tok.n_vocab();
  token_bytes_.resize(static_cast<size_t>(V));
  special_.resize(static_cast<size_t>(V));
  for (int32_t id = 0; id < V; ++id) {
    token_bytes_[id] = tok.token_bytes(id);
    special_[id] = tok.token_type(id) == text::TokenType::kControl || tok.token_type(id) == text::TokenType::kUnused;
  }
  stats_.cache = cache_.stats();
  stats_.experts = engine_.model().expert_stats();
  if (world().size() > 1) {
    comm_ = &world();
    follower_ = comm_->rank() != 0;
    // Settings each rank chose from its own memory agree (the smallest), so every rank holds the same sequences.
    o_.parallel = static_cast<int>(min_over_ranks(*comm_, o_.parallel));
    const int64_t none = std::numeric_limits<int64_t>::max();
    const int64_t kv = min_over_ranks(*comm_, o_.kv_tokens > 0 ? o_.kv_tokens : none);
    o_.kv_tokens = kv == none ? 0 : kv;
    stats_.kv_tokens = o_.kv_tokens;
    cache_.set_comm(comm_);
  }
  slots_.resize(o_.parallel);
  for (int i = 0; i < o_.parallel; ++i)
    states_.push_back(engine.new_sequence());
  thread_ = std::thread([this] { follower_ ? follow() : loop(); });
}

void Scheduler::wait() {
  if (!follower_) fail("internal: Scheduler::wait is for followers (the leader stops when destroyed)");
  if (thread_.joinable()) thread_.join();
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& j : queue_) j->c->post("", Finish::kCancelled, "server shutting down");
  for (auto& j : slots_)
    if (j) j->c->post("", Finish::kCancelled, "server shutting down");
}

int64_t Scheduler::kv_rows(const GenRequest& r) const {
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  const int64_t gen = r.max_tokens >= 0 ? r.max_tokens : n_ctx_;
  return std::min(n_ctx_, n + gen + engine_.decoder().max_draft());
}

std::shared_ptr<Completion> Scheduler::submit(GenRequest r) {
  if (follower_) fail("internal: a follower scheduler takes no requests");
  std::unique_ptr<Job> job = make_job(std::move(r));
  std::shared_ptr<Completion> c = job->c;
  {
    std::lock_guard lk(m_);
    if (static_cast<int>(queue_.size()) >= o_.max_queue && std::none_of(slots_.begin(), slots_.end(),
                                                                       [](const auto& s) { return !s; }))
      throw AdmissionError(strf("the server is busy: %zu requests are already waiting", queue_.size()), true);
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return c;
}

std::unique_ptr<Scheduler::Job> Scheduler::make_job(GenRequest r) {
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n == 0) throw AdmissionError("the prompt is empty (it has no tokens)", false);
  const int32_t V = tok_.n_vocab();
  for (int32_t t : r.prompt)
    if (t < 0 || t >= V || t >= engine_.info().n_vocab)
      throw AdmissionError(strf("token id %d is out of range (vocabulary size %d)", t, V), false);
  const int64_t need = n + std::max(r.max_tokens, 1);
  if (need > n_ctx_)
    throw AdmissionError(
        strf("this request needs %lld tokens (%lld in the prompt + %d to generate) but a sequence holds %lld "
             "(the server's -c); shorten the prompt or lower max_tokens",
             static_cast<long long>(need), static_cast<long long>(n), std::max(r.max_tokens, 1),
             static_cast<long long>(n_ctx_)),
        false);
  const int64_t rows = kv_rows(r);
  if (o_.kv_tokens > 0 && rows > o_.kv_tokens)
    throw AdmissionError(strf("this request may need %lld tokens of KV cache (%lld in the prompt + %d to generate) "
                              "but the server holds %lld for all requests; lower max_tokens",
                              static_cast<long long>(rows), static_cast<long long>(n), r.max_tokens,
                              static_cast<long long>(o_.kv_tokens)),
                         false);
  auto job = std::make_unique<Job>(std::move(r), tok_);  // validates the sampling parameters
  job->kv_rows = rows;
  if (job->req.json_object && !job->req.choice.empty())
    throw AdmissionError("a request cannot be constrained to JSON and to a choice at once", false);
  if (job->req.json_object) {
    if (!job->req.json_schema.is_null()) {
      const std::string why = check_schema(job->req.json_schema);
      if (!why.empty()) throw AdmissionError(why, false);
    }
    job->json = std::make_unique<JsonConstraint>(token_bytes_, special_, job->req.json_schema);
  }
  if (!job->req.choice.empty()) job->json = std::make_unique<ChoiceConstraint>(token_bytes_, special_, job->req.choice);
  for (int32_t t : job->req.prompt) job->sampler.accept(t);
  // Snapshot points: after every end-of-turn token (the end of a message) and at the end of the prompt.
  for (int64_t i = 0; i < n; ++i)
    if (std::binary_search(eog_.begin(), eog_.end(), job->req.prompt[i])) job->points.push_back(i + 1);
  if (job->points.empty() || job->points.back() != n) job->points.push_back(n);
  job->c->n_prompt_ = n;
  return job;
}

void Scheduler::cancel_all() {
  {
    std::lock_guard lk(m_);
    for (auto& j : queue_) j->c->cancel();
    for (auto& j : slots_)
      if (j) j->c->cancel();
  }
  cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(m_);
  SchedulerStats s = stats_;
  s.queued = static_cast<int64_t>(queue_.size());
  const models::Model& m = engine_.model();  // experts_streamed() and expert_slots() are fixed at start-up
  s.expert_slots = m.experts_streamed() ? m.expert_slots() : 0;
  s.active = std::count_if(slots_.begin(), slots_.end(), [](const auto& j) { return j != nullptr; });
  return s;
}

void Scheduler::finish(Job& j, Finish f, const std::string& error) {
  j.done = true;
  j.c->post("", f, error);
}

namespace {

// A request as the leader broadcasts it to the followers (every field of GenRequest).
nlohmann::json request_json(const GenRequest& r) {
  const runtime::SamplingParams& p = r.sampling;
  return {{"prompt", r.prompt}, {"top_logprobs", r.top_logprobs}, {"max_tokens", r.max_tokens}, {"stop", r.stop},
          {"ignore_eos", r.ignore_eos}, {"json_object", r.json_object}, {"json_schema", r.json_schema},
          {"choice", r.choice},
          {"sampling", {{"temperature", p.temperature}, {"top_k", p.top_k}, {"top_p", p.top_p}, {"min_p", p.min_p},
                        {"repeat_penalty", p.repeat_penalty}, {"presence_penalty", p.presence_penalty},
                        {"frequency_penalty", p.frequency_penalty}, {"penalty_last_n", p.penalty_last_n},
                        {"seed", p.seed}}}};
}

GenRequest request_from_json(const nlohmann::json& j) {
  GenRequest r;
  r.prompt = j.at("prompt").get<std::vector<int32_t>>();
  r.top_logprobs = j.at("top_logprobs").get<int>();
  r.max_tokens = j.at("max_tokens").get<int>();
  r.stop = j.at("stop").get<std::vector<std::string>>();
  r.ignore_eos = j.at("ignore_eos").get<bool>();
  r.json_object = j.at("json_object").get<bool>();
  r.json_schema = j.at("json_schema");
  r.choice = j.at("choice").get<std::vector<std::string>>();
  const nlohmann::json& p = j.at("sampling");
  runtime::SamplingParams& s = r.sampling;
  s.temperature = p.at("temperature").get<float>();
  s.top_k = p.at("top_k").get<int>();
  s.top_p = p.at("top_p").get<float>();
  s.min_p = p.at("min_p").get<float>();
  s.repeat_penalty = p.at("repeat_penalty").get<float>();
  s.presence_penalty = p.at("presence_penalty").get<float>();
  s.frequency_penalty = p.at("frequency_penalty").get<float>();
  s.penalty_last_n = p.at("penalty_last_n").get<int>();
  s.seed = p.at("seed").get<uint64_t>();
  return r;
}

// The leader's message before a step (or at the end): rank 0's `msg` on every rank.
void broadcast_json(Comm& comm, nlohmann::json& msg) {
  std::string text;
  if (comm.rank() == 0) text = msg.dump();
  int64_t n = static_cast<int64_t>(text.size());
  comm.broadcast_idle(&n, sizeof n, 0);  // followers may wait here for the next request
  text.resize(static_cast<size_t>(n));
  comm.broadcast(text.data(), static_cast<size_t>(n), 0);
  if (comm.rank() != 0) msg = nlohmann::json::parse(text);
}

}  // namespace

void Scheduler::retire_done() {
  std::lock_guard lk(m_);
  for (auto& j : slots_)
    if (j && j->done) {
      if (j->c->finish() == Finish::kCancelled) ++stats_.requests_cancelled;
      else ++stats_.requests_done;
      stats_.kv_reserved -= j->kv_rows;
      // Its rows go back to the system (the prefix cache holds its own copies): the memory of a sequence is what
      // its request runs, not the longest request it ever ran.
      if (o_.kv_tokens > 0) {
        states_[j->slot]->reset();
        states_[j->slot]->release_rows(0);
      }
      j.reset();
    }
}

void Scheduler::loop() {
  uint64_t order = 0;
  std::vector<Job*> jobs;
  for (;;) {
    nlohmann::json tick;  // across ranks: what the followers need to take this step as the leader does
    {
      std::unique_lock lk(m_);
      // Requests cancelled while waiting leave the queue; the rest fill free sequences in arrival order.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->c->cancelled()) {
          finish(**it, Finish::kCancelled);
          ++stats_.requests_cancelled;
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      // First come, first served: the queue's first request takes a free sequence once its KV rows fit too
      // (nothing overtakes it, so a large request is not starved by small ones).
      for (int s = 0; s < o_.parallel && !queue_.empty(); ++s) {
        if (slots_[s]) continue;
        if (o_.kv_tokens > 0 && stats_.kv_reserved + queue_.front()->kv_rows > o_.kv_tokens) {
          if (!queue_.front()->kv_waited) {
            queue_.front()->kv_waited = true;
            ++stats_.kv_waits;
          }
          break;
        }
        stats_.kv_reserved += queue_.front()->kv_rows;
        slots_[s] = std::move(queue_.front());
        queue_.pop_front();
        slots_[s]->slot = s;
        slots_[s]->order = order++;
        slots_[s]->fresh = true;
        admitted_.push_back(s);
      }
      cv_.wait(lk, [&] {
        return stop_ || !queue_.empty() || std::any_of(slots_.begin(), slots_.end(), [](const auto& j) { return j != nullptr; });
      });
      if (stop_) {
        if (comm_) {
          lk.unlock();
          tick = {{"stop", true}};
          broadcast_json(*comm_, tick);
        }
        return;
      }
      jobs.clear();
      for (auto& j : slots_)
        if (j) jobs.push_back(j.get());
      nlohmann::json cancelled = nlohmann::json::array();
      for (Job* j : jobs)  // a cancellation counts from here: the same step on every rank
        if (!j->cancel_seen && j->c->cancelled()) {
          j->cancel_seen = true;
          cancelled.push_back(j->slot);
        }
      if (comm_ && !jobs.empty()) {
        nlohmann::json admit = nlohmann::json::array();
        for (int s : admitted_)
          admit.push_back({{"slot", s}, {"order", slots_[s]->order}, {"request", request_json(slots_[s]->req)}});
        tick = {{"stop", false}, {"admit", std::move(admit)}, {"cancel", std::move(cancelled)}};
      }
      if (!jobs.empty()) admitted_.clear();
    }
    if (jobs.empty()) continue;
    if (comm_) broadcast_json(*comm_, tick);
    run_step(jobs);
  }
}

void Scheduler::follow() {
  std::vector<Job*> jobs;
  try {
    for (;;) {
      nlohmann::json tick;
      broadcast_json(*comm_, tick);
      if (tick.at("stop").get<bool>()) return;
      {
        std::lock_guard lk(m_);
        for (const nlohmann::json& a : tick.at("admit")) {
          const int s = a.at("slot").get<int>();
          if (s < 0 || s >= o_.parallel || slots_[s]) fail("the leader gave sequence %d, which is not free here", s);
          slots_[s] = make_job(request_from_json(a.at("request")));
          slots_[s]->slot = s;
          slots_[s]->order = a.at("order").get<uint64_t>();
          slots_[s]->fresh = true;
          stats_.kv_reserved += slots_[s]->kv_rows;
        }
        for (const nlohmann::json& c : tick.at("cancel")) {
          const int s = c.get<int>();
          if (s < 0 || s >= o_.parallel || !slots_[s]) fail("the leader cancelled sequence %d, which is free here", s);
          slots_[s]->cancel_seen = true;
        }
        jobs.clear();
        for (auto& j : slots_)
          if (j) jobs.push_back(j.get());
      }
      run_step(jobs);
    }
  } catch (const std::exception& e) {  // a follower out of step with the leader cannot recover: end the job
    std::fprintf(stderr, "tern: error: rank %d of %d: serving: %s\n", comm_->rank(), comm_->size(), e.what());
    comm_->abort(1);
  }
}

// One step of the running sequences, the same on the leader and every follower: new jobs start (prompt and prefix
// cache), all take one batched step in admission order, finished ones leave.
void Scheduler::run_step(std::vector<Job*>& jobs) {
  for (Job* j : jobs)
    if (j->fresh) start(*j);
  std::sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) { return a->order < b->order; });
  step(jobs);
  retire_done();
}

void Scheduler::start(Job& j) {
  j.fresh = false;
  SequenceState& st = *states_[j.slot];
  st.reset();
  j.n_fed = cache_.restore(j.req.prompt, st);
  j.c->n_cached_ = j.n_fed;
}

void Scheduler::snapshot_answer(Job& j) {
  if (!cache_.enabled()) return;
  SequenceState& st = *states_[j.slot];
  const int64_t n_prompt = static_cast<int64_t>(j.req.prompt.size());
  int64_t n_gen = st.n_past() - n_prompt;
  if (n_gen <= 0 || n_gen > static_cast<int64_t>(j.c->tokens_.size())) return;
  // Without drafting a sequence ends holding every answer token but the last (sampled, never fed); with drafting
  // the last one is in the state too when it was an accepted draft. Step back to where a sequence without drafting
  // ends, so what is cached (and where a follow-up resumes) does not depend on the drafts.
  if (n_gen == static_cast<int64_t>(j.c->tokens_.size())) {
    try {
      st.rollback(st.n_past() - 1);
      --n_gen;
    } catch (const Error&) {
      // no checkpoint of that position (not a verify forward): cache what the state holds
    }
    if (n_gen <= 0) return;
  }
  std::vector<int32_t> key = j.req.prompt;
  key.insert(key.end(), j.c->tokens_.begin(), j.c->tokens_.begin() + n_gen);
  cache_.insert(key, st);
}

void Scheduler::step(std::vector<Job*>& jobs) {
  // One decode-loop step (runtime/decode_loop.h): every decoding sequence feeds its last sampled token (plus its
  // drafts), prefilling ones a prompt chunk. seqs_ keeps one entry per job of this step (no allocation per step once
  // grown); owner_ says whose it is.
  std::vector<Job*>& owner = owner_;
  owner.clear();
  size_t n = 0;
  auto add = [&](Job* j, const int32_t* first, const int32_t* last, bool sample) {
    if (n == seqs_.size()) seqs_.emplace_back();
    runtime::DecodeSeq& d = seqs_[n++];
    d.state = states_[j->slot].get();
    d.feed.assign(first, last);
    d.sample = sample;
    owner.push_back(j);
  };
  // Cancelled requests leave before the forward.
  for (Job* j : jobs)
    if (j->cancel_seen && !j->done) finish(*j, Finish::kCancelled);
  for (Job* j : jobs) {
    if (j->done || j->prefilling()) continue;
    add(j, &j->next, &j->next + 1, true);
  }
  // Prompt chunks, first come first served, within the step's budget. A chunk runs from n_fed to the next multiple
  // of `batch` in the prompt, so chunk boundaries do not depend on what else is running.
  int64_t budget = o_.batch, n_prompt_rows = 0;
  for (Job* j : jobs) {
    if (j->done || !j->prefilling()) continue;
    const int64_t np = static_cast<int64_t>(j->req.prompt.size());
    int64_t end = std::min(np, (j->n_fed / o_.batch + 1) * o_.batch);
    auto point = std::upper_bound(j->points.begin(), j->points.end(), j->n_fed);
    if (cache_.enabled() && point != j->points.end()) end = std::min(end, *point);
    if (end - j->n_fed > budget) break;
    add(j, j->req.prompt.data() + j->n_fed, j->req.prompt.data() + end, end == np);
    budget -= end - j->n_fed;
    n_prompt_rows += end - j->n_fed;
  }
  if (n == 0) return;
  std::vector<runtime::DecodeSeq*> seqs(n);
  for (size_t i = 0; i < n; ++i) seqs[i] = &seqs_[i];

  const int64_t V = engine_.info().n_vocab;
  int64_t n_sampled = 0;
  std::vector<Job*> ended;  // finished by a token this step: their answers go to the prefix cache after the step
  auto pick = [&](size_t i, const runtime::LogitsRow& share, int32_t) -> int32_t {
    Job& j = *owner[i];
    // Across ranks a row is this rank's columns: sampled as it is (a reduction of candidates), gathered whole only
    // for a constraint's mask or log-probabilities (every rank's job has the same settings: the same collectives).
    const bool whole = j.json || j.req.top_logprobs >= 0;
    const float* raw = whole ? runtime::whole_row(share, row_) : nullptr;
    const float* row = raw;
    int32_t tok;
    try {
      if (!whole) {
        tok = j.sampler.sample(share);
      } else {
        if (j.json) {  // only tokens that keep the answer a JSON-object prefix
          masked_.assign(row, row + V);
          if (!j.json->mask(masked_.data(), V)) fail("constrained decoding: no token can continue the JSON answer");
          row = masked_.data();
        }
        tok = j.sampler.sample(row, V);
        if (j.json && std::isinf(row[tok])) tok = runtime::argmax(row, V);  // never a masked token
      }
    } catch (const std::exception& e) {
      finish(j, Finish::kError, e.what());
      seqs[i]->stopped = true;
      return -1;
    }
    ++n_sampled;
    // log-probabilities are the model's, before the JSON mask (as for other filters)
    if (!after_token(j, tok, raw, seqs[i]->n_past)) {
      seqs[i]->stopped = true;
      ended.push_back(&j);
    }
    return tok;
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    engine_.decoder().step(seqs, pick);
  } catch (const std::exception& e) {
    log::error("forward failed for a batch of %zu sequences: %s", seqs.size(), e.what());
    for (Job* j : owner)
      if (!j->done) finish(*j, Finish::kError, e.what());
    return;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < n; ++i) {
    Job& j = *owner[i];
    if (!j.prefilling()) continue;
    j.n_fed += static_cast<int64_t>(seqs_[i].feed.size());
    if (cache_.enabled() && std::binary_search(j.points.begin(), j.points.end(), j.n_fed)) {
      std::vector<int32_t> key(j.req.prompt.begin(), j.req.prompt.begin() + j.n_fed);
      if (!cache_.contains(key)) cache_.insert(key, *states_[j.slot]);
    }
  }
  for (Job* j : ended) snapshot_answer(*j);  // the states are back at the tokens kept
  std::lock_guard lk(m_);
  stats_.steps++;
  stats_.busy_seconds += dt;
  stats_.prompt_tokens += n_prompt_rows;
  stats_.completion_tokens += n_sampled;
  stats_.cache = cache_.stats();
  stats_.experts = engine_.model().expert_stats();  // copied here, on the thread that runs the forwards
  stats_.draft = engine_.decoder().stats();
}

// log-softmax of the row at `tok`, and the n largest entries (ties: lower id first). ids: scratch, [V] after.
static TokenLogprob logprob_of(const float* logits, int64_t V, int32_t tok, int n, std::vector<int32_t>& ids) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i)
    if (logits[i] > mx) mx = logits[i];
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob lp;
  lp.id = tok;
  lp.logprob = static_cast<float>(logits[tok] - lse);
  if (n > 0) {
    ids.resize(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min<size_t>(static_cast<size_t>(n), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - lse));
  }
  return lp;
}

bool Scheduler::after_token(Job& j, int32_t tok, const float* logits, int64_t n_past) {
  j.sampler.accept(tok);
  const bool eog = !j.req.ignore_eos && std::binary_search(eog_.begin(), eog_.end(), tok);
  {
    std::lock_guard lk(j.c->m_);
    j.c->tokens_.push_back(tok);
    // End-of-generation tokens are not part of the answer's text, nor of its log-probabilities.
    if (j.req.top_logprobs >= 0 && !eog)
      j.c->pending_logprobs_.push_back(logprob_of(logits, engine_.info().n_vocab, tok, j.req.top_logprobs, top_ids_));
  }
  ++j.c->n_generated_;
  const int64_t n_gen = static_cast<int64_t>(j.c->tokens_.size());
  if (eog) {
    std::string rest = j.text.finish();
    j.c->stop_string_ = j.text.matched_stop();  // a stop string completed by the final flush
    j.c->post(rest, Finish::kStop);
    j.done = true;
    return false;
  }
  bool stopped = false;
  std::string piece = j.text.push(tok, &stopped);
  if (j.json) j.json->accept(tok);
  if (!stopped && j.json && j.json->done()) {
    if (j.json->ends_answer()) {  // the JSON object is complete: that is the whole answer
      j.c->post(piece + j.text.finish(), Finish::kStop);
      j.done = true;
      return false;
    }
    j.json.reset();  // the forced part is over; the rest is free
  }
  if (stopped) {
    j.c->stop_string_ = j.text.matched_stop();
    j.c->post(piece, Finish::kStop);
    j.done = true;
    return false;
  }
  if ((j.req.max_tokens >= 0 && n_gen >= j.req.max_tokens) || n_past >= states_[j.slot]->n_ctx()) {
    j.c->post(piece + j.text.finish(), Finish::kLength);
    j.done = true;
    return false;
  }
  j.c->post(piece);  // wakes the client for text or log-probabilities
  j.next = tok;
  return true;
}

}  // namespace tern::serve
