// Continuous batching: up to `parallel` sequences share one forward per step. Each step feeds every decoding
// sequence its last sampled token plus prompt chunks of sequences still prefilling (at most `batch` prompt tokens
// per step, so a long prompt does not stall running streams). Requests join and leave between steps; a request
// whose prompt plus max_tokens cannot fit one sequence's context is refused at submit().
//
// Prompt chunks start at multiples of `batch` in the prompt whatever else runs, so a sequence's tokens are the same
// alone or batched (the forward is batch-invariant; tests/serve checks it). Non-goals: priorities, preemption.
//
// Across ranks (mpirun; core/comm.h world() has more than one rank): rank 0 takes requests (submit) and leads;
// every other rank runs a follower scheduler with the same sequences. Before each step the leader broadcasts what
// changed since the last one (requests admitted to which sequence, running requests cancelled, or the end), so
// every rank's scheduler takes the same decisions and runs the same forwards; nothing else a scheduler decides
// depends on the rank (the decode loop's draft length is fixed across ranks, the prefix cache agrees on sizes).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "serve/json_constraint.h"
#include "serve/prefix_cache.h"
#include "serve/text_stream.h"
#include "text/tokenizer.h"

namespace tern::serve {

struct SchedulerOptions {
  int parallel = 4;      // sequences decoded together (each holds a full-context state)
  int batch = 256;       // most prompt tokens fed per step (over all prefilling sequences)
  int64_t n_ctx = 0;     // per-sequence context (0: the engine's)
  int max_queue = 256;   // requests waiting for a free sequence before submit() refuses more
  size_t cache_bytes = 0; // prefix-cache budget (0: off)
  // KV rows all running sequences may hold together (0: no limit beyond parallel x n_ctx). A request reserves the
  // rows it can write (prompt + max_tokens + drafts, at most the context) and waits in the queue until they fit;
  // a sequence's rows go back to the system when its request ends (SequenceState::release_rows).
  int64_t kv_tokens = 0;
};

struct GenRequest {
  std::vector<int32_t> prompt;
  int top_logprobs = -1;            // < 0: no log-probabilities; n >= 0: the chosen token's and the n most likely
  runtime::SamplingParams sampling;
  int max_tokens = -1;              // < 0: until end of generation or the context is full
  std::vector<std::string> stop;    // stop strings (excluded from the text)
  bool ignore_eos = false;
  bool json_object = false;         // constrain the answer to one JSON object (ends when it closes)
  nlohmann::ordered_json json_schema;  // with json_object: the object's schema (null: any object)
  std::vector<std::string> choice;  // non-empty: the answer starts with exactly one of these strings
};

// Log-probability of a generated token under the model (log-softmax of its logits, before sampling filters), and
// the most likely alternatives, most likely first.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

enum class Finish { kNone, kStop, kLength, kCancelled, kError };
const char* finish_name(Finish f);  // OpenAI finish_reason: "stop", "length", ...

// One submitted request as its client sees it: text arrives piece by piece; cancel() stops it at the next step.
class Completion {
 public:
  // Waits until there is new text or the request finished (or the timeout passes). Appends new text to *out.
  // Returns true once the request has finished and all its text has been taken.
  // Log-probabilities (when requested) of the tokens generated since the last wait() go to *logprobs.
  bool wait(std::string* out, std::chrono::milliseconds timeout, std::vector<TokenLogprob>* logprobs = nullptr);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Valid once wait() returned true.
  Finish finish() const;
  const std::string& error() const { return error_; }
  // The stop string that ended the answer (finish kStop); empty when an end token or a finished JSON answer did.
  const std::string& stop_string() const { return stop_string_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // generated ids (a final end token included)
  int64_t n_prompt() const { return n_prompt_; }
  int64_t n_cached() const { return n_cached_; }  // prompt tokens restored from the prefix cache
  int64_t n_completion() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t n_generated() const { return n_generated_; }  // so far; safe to read while it runs

 private:
  friend class Scheduler;
  void post(const std::string& text, Finish f = Finish::kNone, const std::string& error = {});

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::string pending_;
  std::vector<TokenLogprob> pending_logprobs_;
  Finish finish_ = Finish::kNone;
  std::string error_;
  std::string stop_string_;  // written by the scheduler thread before it posts the finish
  std::vector<int32_t> tokens_;  // written by the scheduler thread before it posts kNone -> finished
  int64_t n_prompt_ = 0;
  std::atomic<int64_t> n_cached_{0};
  std::atomic<int64_t> n_generated_{0};
  std::atomic<bool> cancelled_{false};
};

struct SchedulerStats {
  int64_t queued = 0, active = 0;            // now
  int64_t kv_reserved = 0, kv_tokens = 0;    // KV rows reserved by running requests, and the limit (0: none)
  int64_t kv_waits = 0;                      // times the queue's first request waited for KV rows (not a slot)
  int64_t requests_done = 0, requests_cancelled = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t steps = 0;
  double busy_seconds = 0;                   // time spent in forwards
  PrefixCacheStats cache;
  models::ExpertCacheStats experts;  // streamed experts (--mem-budget); zeros when mapped
  int64_t expert_slots = 0;                     // experts cached per layer; 0 when mapped
  runtime::DraftStats draft;                    // speculative decoding (all zeros when the model does not draft)
};

class Scheduler {
 public:
  Scheduler(runtime::Engine& engine, const text::Tokenizer& tok, const SchedulerOptions& o);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Throws tern::Error (nothing queued) when it can never fit a sequence's context or the queue
  // is full (AdmissionError tells which).
  std::shared_ptr<Completion> submit(GenRequest r);

  void cancel_all();  // every queued and running request (shutdown)
  int64_t n_ctx() const { return n_ctx_; }
  // KV rows a request reserves while it runs: prompt + max_tokens (or the whole context) + the most drafted rows,
  // at most the context.
  int64_t kv_rows(const GenRequest& r) const;
  int parallel() const { return o_.parallel; }
  SchedulerStats stats() const;
  // A follower (rank > 0 across ranks) takes no requests; wait() returns once the leader has stopped.
  bool follower() const { return follower_; }
  void wait();

 private:
  struct Job;
  void loop();
  void follow();  // a follower's loop: the leader's broadcasts, then the same steps
  std::unique_ptr<Job> make_job(GenRequest r);  // validated, constraints built, prompt seen by the sampler
  void retire_done();  // frees the sequences of finished requests
  void step(std::vector<Job*>& jobs);
  void run_step(std::vector<Job*>& jobs);  // start fresh jobs, step all in admission order, retire finished ones
  bool after_token(Job& j, int32_t tok, const float* logits, int64_t n_past);  // false: the job has finished (its answer is
                                                               // snapshot by step() once the state is rolled back)
  void start(Job& j);                     // a job that just got a sequence: reset it, resume a cached prefix
  void snapshot_answer(Job& j);           // the prompt and the answer so far, into the prefix cache
  void finish(Job& j, Finish f, const std::string& error = {});

  runtime::Engine& engine_;
  const text::Tokenizer& tok_;
  SchedulerOptions o_;
  int64_t n_ctx_;
  std::vector<int32_t> eog_;  // sorted end-of-generation ids
  std::vector<std::string> token_bytes_;  // [n_vocab], for constrained decoding
  std::vector<bool> special_;             // [n_vocab] control tokens (never inside constrained output)
  std::vector<float> masked_;             // scratch row for constrained sampling
  // Scheduler-thread scratch reused every step: the forward's rows and the job of each, top-logprob candidates.
  std::vector<runtime::DecodeSeq> seqs_;
  std::vector<Job*> owner_;
  std::vector<int32_t> top_ids_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  std::vector<std::unique_ptr<Job>> slots_;  // [parallel]; null = free
  std::vector<std::unique_ptr<models::SequenceState>> states_;  // [parallel]
  PrefixCache cache_;  // scheduler thread only; its stats are copied into stats_
  bool stop_ = false;
  SchedulerStats stats_;
  Comm* comm_ = nullptr;       // across ranks: the job's ranks (null: one process)
  bool follower_ = false;
  std::vector<int> admitted_;  // leader: sequences given to requests since the last broadcast
  std::vector<float> row_;     // a gathered logits row (constrained decoding, log-probabilities across ranks)
  std::thread thread_;
};

// Refusal at submit(): `queue_full` distinguishes a busy server from a request that can never fit.
class AdmissionError : public Error {
 public:
  AdmissionError(const std::string& what, bool queue_full) : Error(what), queue_full(queue_full) {}
  bool queue_full;
};

}  // namespace tern::serve
