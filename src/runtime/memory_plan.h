// The memory planner: from a GGUF's header alone (nothing is read from the tensor data), what a run will hold
// in memory — dense weights (mapped, read whole), routed experts (mapped, or streamed through a cache),
// per-sequence state (KV cache + recurrent state), forward buffers and the program itself — and, under a
// budget, how many experts per layer the cache gets. `tern plan` prints it; the Engine sizes the real
// expert cache from the same plan, so the plan and the measured resident set agree.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "models/model.h"
#include "ops/attention.h"

namespace tern::runtime {

// Prompt tokens one forward takes at most (longer prompts go in chunks of this many): bounds the buffers.
inline constexpr int64_t kMaxBatchRows = 512;
inline constexpr int kDefaultDraft = 3;  // tokens the MTP block drafts per step when the file has one (adaptive)

struct MemoryRequest {
  int64_t n_ctx = 0;          // per sequence, already resolved (> 0)
  int n_parallel = 1;         // sequences held at once
  ops::KvConfig kv;           // the KV cache's types, sink and window
  int64_t batch_rows = kMaxBatchRows;  // rows of the largest forward
  uint64_t budget = 0;        // bytes; 0: no budget (everything mapped, the page cache decides)
  int64_t expert_slots = 0;   // experts cached per layer; 0: from the budget (or mapped without one)
  uint64_t prefix_cache = 0;  // the server's prefix-cache budget
  bool repack = true;         // matrices repacked for the kernels (Model::repack): their repacked sizes count
  int64_t checkpoints = 0;    // recurrent-state checkpoints per sequence (speculative decoding: --draft + 1)
  int64_t kv_tokens = 0;      // > 0: the sequences share this many KV rows (AutoParallel) instead of n_ctx each
};

// Checkpoints per sequence the decode loop sets for these options on a model (0 without drafting): one shared rule
// for the engine and `tern plan`.
int64_t draft_checkpoints(const models::ModelShape& m, int draft, bool no_spec);

struct MemoryPlan {
  uint64_t file_bytes = 0;
  uint64_t dense = 0;          // weights read in full: embeddings, attention, DeltaNet, routers, shared experts
  uint64_t experts = 0;        // all routed experts in the file
  uint64_t mtp = 0;            // of dense + experts: the MTP block (speculative decoding's draft)
  std::vector<uint64_t> expert_bytes;  // one expert (gate + up + down) of each layer
  uint64_t state = 0;          // n_parallel sequences of KV cache + recurrent state (+ checkpoints when drafting)
  uint64_t checkpoints = 0;    // of state: the recurrent-state checkpoints speculative decoding keeps
  uint64_t buffers = 0;        // forward scratch and logits
  uint64_t runtime = 0;        // program, libraries, parsed metadata and tokenizer (an estimate)
  uint64_t prefix_cache = 0;   // server prefix cache (at most)
  bool streamed = false;       // experts read on demand into a cache (else mapped)
  bool repacked = false;       // weights and expert slots hold repacked matrices (anonymous memory)
  int64_t n_expert = 0;
  int64_t slots = 0;           // experts per layer in the cache (streamed)
  uint64_t expert_cache = 0;   // bytes of those slots
  uint64_t budget = 0;
  bool fits = true;
  std::string verdict;         // one line: the mode, or why it does not fit

  uint64_t resident_experts() const { return streamed ? expert_cache : experts; }
  uint64_t total() const { return dense + resident_experts() + state + buffers + runtime + prefix_cache; }
  // The least a budget must be for streaming to work at all: one expert per layer.
  uint64_t minimum() const;
};

// Memory the system reports available now (/proc/meminfo MemAvailable: free plus reclaimable page cache; else
// sysconf's free pages), or 4 GB when it cannot tell.
double available_memory_bytes();

// The context size for -c 0: the model's training context, halved (not below 256) while the state of
// n_parallel sequences exceeds half the available memory, or a quarter of the budget when there is one.
int64_t default_n_ctx(const models::ModelShape& m, const ops::KvConfig& kv, int n_parallel, uint64_t budget);

// --parallel auto, in the room default_n_ctx allows for state (half the available memory, or a quarter of the
// budget): as many sequences of n_ctx tokens (with `checkpoints` recurrent-state checkpoints each) as fit whole,
// at least 1. When fewer than kMaxAutoParallel fit whole, more run (up to kMaxAutoParallel) sharing a KV budget of
// kv_tokens rows (at least the rows of the sequences that fit whole, so never fewer tokens in flight and any
// request that fits a context can run), which the server admits requests against; kv_tokens 0: no shared budget
// (every sequence can hold a whole context).
inline constexpr int kMaxAutoParallel = 64;
struct AutoParallel {
  int n = 1;
  int64_t kv_tokens = 0;
  uint64_t per_sequence = 0;  // one sequence's state at n_ctx
  uint64_t fixed = 0;         // of that: what does not grow with tokens (recurrent state, checkpoints)
  uint64_t per_token = 0;     // KV bytes per token (all layers)
  uint64_t room = 0;
};
AutoParallel auto_parallel(const models::ModelShape& m, const ops::KvConfig& kv, int64_t n_ctx, int64_t checkpoints,
                           uint64_t budget);

// The model answers for its own sizes (weights as held, state, forward buffers); the plan adds them up.
MemoryPlan plan_memory(const models::ModelShape& m, const MemoryRequest& r);

// The plan as an aligned table (what `tern plan` prints and the engine logs under a budget).
std::string format_plan(const MemoryPlan& p);
// "f16", "q4_0, rotated, sink 16 + window 128 in f16", "K q8_0 / V f16, ...": what the KV cache keeps.
std::string kv_description(const ops::KvConfig& kv);

// "12G", "512M", "1.5GiB", "800000000": binary units K/M/G/T (with optional "i", "B"). Throws Error naming
// `flag` and the text when it is not a positive size.
uint64_t parse_size(const std::string& text, const char* flag);
std::string format_bytes(uint64_t bytes);  // "1.25 GiB", "300.0 MiB"

}  // namespace tern::runtime
