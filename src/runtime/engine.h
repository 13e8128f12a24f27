// Engine: a loaded model plus the settings every command shares (threads, context size, KV type).
// Every automatic choice (context size, threads, kernel ISA) is logged once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "models/model.h"
#include "runtime/decode_loop.h"
#include "runtime/memory_plan.h"

namespace tern::runtime {

struct EngineOptions {
  std::string model_path;
  int64_t n_ctx = 0;           // 0: the model's training context, capped by free memory
  int threads = 0;             // 0: all hardware threads
  std::string kv_type = "f16"; // f32 | f16 | q8_0 | q4_0, for K and V
  std::string kv_type_k;       // --kv-type-k: K rows' type (empty: --kv-type)
  std::string kv_type_v;       // --kv-type-v: V rows' type (empty: --kv-type)
  std::string kv_rotate = "auto";  // --kv-rotate auto|on|off (auto: on for a quantized cache)
  int64_t kv_sink = -1;        // --kv-sink N: positions kept in f16 at the start (-1: kDefaultKvSink when quantized)
  int64_t kv_window = -1;      // --kv-window N: latest positions kept in f16 (-1: kDefaultKvWindow when quantized)
  std::string dump_dir;        // --dump-tensors DIR: write named intermediates as .npy
  std::string mem_budget;      // --mem-budget SIZE: stream experts through a cache so memory stays within SIZE
  int64_t expert_cache = 0;    // --expert-cache N: stream with exactly N experts per layer cached
  bool stats = false;          // --stats: print expert-cache counters and memory use when the engine ends
  bool no_repack = false;      // --no-repack: compute from the file's layout (else matrices are repacked at load)
  bool expert_parallel = false;  // --expert-parallel: across ranks, whole experts per rank (else rows of every expert)
  bool partial_sums = false;     // --partial-sums: across ranks, out projections by columns, outputs summed over ranks
  int draft = -1;              // --draft N: most tokens the MTP block drafts per step (-1: 3 when the file has one)
  float draft_min_p = 0.0f;    // --draft-min-p P: a draft chain stops at a token below this probability
  bool no_spec = false;        // --no-spec: no speculative decoding
  bool draft_fixed = false;    // --draft-fixed: draft the full length every step (no adaptation; for measuring)
  std::string mla_form = "auto";  // --mla-form auto|absorbed|expanded (MLA models)
  std::string isa = "auto";    // --isa auto|avx512|avx2|ref: the kernels' instruction set (auto: the best one)
  // Set by commands that hold several sequences or big batches (serve), for the memory plan. 0: as many as fit
  // (--parallel auto: runtime::auto_parallel, logged; Engine::n_parallel() tells the number).
  int n_parallel = 1;
  int64_t batch_rows = kMaxBatchRows;
  uint64_t prefix_cache_bytes = 0;
};

// The parts of EngineOptions that are checked and parsed before a model is loaded (shared by the engine and
// `tern plan`): throws Error naming the flag for a negative -c or --expert-cache, an unknown --kv-type(-k/-v),
// --kv-rotate, --mla-form or --isa, a negative --kv-sink / --kv-window, or a malformed --mem-budget.
inline constexpr int64_t kDefaultKvSink = 16;     // measured: docs/BENCHMARKS.md, KV cache quality
inline constexpr int64_t kDefaultKvWindow = 128;
struct CheckedOptions {
  ops::KvConfig kv;
  uint64_t budget = 0;  // bytes; 0: no --mem-budget
  models::MlaForm mla_form = models::MlaForm::kAuto;
  std::optional<Isa> isa;  // --isa other than auto
};
CheckedOptions check_options(const EngineOptions& o);

// Resident set of this process now and at its peak (/proc/self/status VmRSS, VmHWM), in bytes.
struct ResidentSet {
  uint64_t now = 0, peak = 0;
};
ResidentSet resident_set();

class Engine {
 public:
  explicit Engine(const EngineOptions& o);
  ~Engine();  // prints the --stats report
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  const MemoryPlan& memory_plan() const { return plan_; }
  void print_stats() const;
  models::Model& model() { return *model_; }
  const models::Model& model() const { return *model_; }
  const models::ModelInfo& info() const { return model_->info(); }
  int64_t n_ctx() const { return n_ctx_; }
  int n_parallel() const { return n_parallel_; }  // sequences the memory plan holds (EngineOptions::n_parallel resolved)
  int64_t kv_tokens() const { return kv_tokens_; }  // > 0: KV rows the sequences share (--parallel auto), else none
  const ops::KvConfig& kv_config() const { return kv_; }
  std::unique_ptr<models::SequenceState> new_sequence() const;
  // The decode loop every generating command runs (speculative when the model can draft and it is not off).
  DecodeLoop& decoder() { return *decoder_; }

  // Feeds tokens to one sequence, in forwards of at most kMaxBatchRows tokens; returns the logits of the last
  // token (or of every token if all_logits).
  const std::vector<float>& eval(models::SequenceState& seq, const std::vector<int32_t>& tokens,
                                 bool all_logits = false);

 private:
  void repack_weights(bool experts_streamed);
  void distribute(Comm& comm, const EngineOptions& o, uint64_t budget);
  std::unique_ptr<models::Model> model_;
  int64_t n_ctx_ = 0;
  int n_parallel_ = 1;
  int64_t kv_tokens_ = 0;
  ops::KvConfig kv_;
  MemoryPlan plan_;
  bool stats_ = false;
  models::RepackReport repack_;
  std::vector<float> all_logits_;
  std::unique_ptr<DecodeLoop> decoder_;
};

// Parses "1,2,3" (also spaces) into token ids; throws Error naming the bad item.
std::vector<int32_t> parse_token_list(const std::string& s);

}  // namespace tern::runtime
