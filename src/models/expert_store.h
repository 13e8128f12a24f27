// Where the MoE block gets a routed expert's three matrices from. Two modes, chosen once at start-up:
//  - mapped (default): views into the memory-mapped file; the page cache decides what stays in memory;
//  - streamed: each MoE layer owns `slots` expert-sized buffers, filled on demand with pread from the GGUF and
//    evicted least-recently-used. Expert pages of the mapping are then never touched, so the process's
//    memory is the dense weights + state + buffers + these slots, whatever the file's size.
// Both modes hand the kernels the same matrices, so outputs are identical at every cache size (tested). When the
// model is repacked (Model::repack), a streamed expert is repacked as it is read into its slot.
// Reads overlap compute: once a layer's routing is known, prefetch() hands the missing experts (as many as
// the cache can take beside the resident ones the step needs) to a reader thread, and the MoE block runs the
// resident experts meanwhile; get() waits only for a read still in flight.
// Non-goals (measured first, see issue 8): frequency-aware eviction, cross-layer prediction, O_DIRECT.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "formats/gguf.h"
#include "models/blocks/linear.h"
#include "models/blocks/moe.h"
#include "models/model.h"

namespace tern::models {

// Where a model's routed experts are: its MoE layers' weights (null for a layer without routed experts), their
// geometry, the file they are mapped from and how the model was repacked. Architecture-independent.
struct ExpertLayout {
  backend::Backend* backend = nullptr;
  const gguf::File* file = nullptr;
  std::vector<const MoeWeights*> layers;  // [layer]
  int64_t n_expert = 0, n_ff_exp = 0, n_embd = 0;
  RepackScope repack_scope = RepackScope::kNone;
  bool rows_grouped = false;  // n_ff_exp and n_embd whole 8-row groups: a slot's expert can be repacked
};

class ExpertStore : public ExpertSource {
 public:
  // Mapped mode.
  explicit ExpertStore(const ExpertLayout& model);
  // Streamed mode with `slots` experts cached per MoE layer (1 <= slots <= n_expert). Opens the model file
  // for reading; throws Error naming it.
  ExpertStore(const ExpertLayout& model, int64_t slots);
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  bool streamed() const override { return fd_ >= 0; }
  int64_t slots() const { return slots_; }
  // Expert e of layer il; in streamed mode valid until the next get() for the same layer.
  ExpertMatrices get(int il, int64_t e) override;
  // Whether get(il, e) would be served without a new read (always true when mapped).
  bool resident(int il, int64_t e) const override { return !streamed() || layers_[il].slot_of[e] >= 0; }
  // Starts reading experts[0..n) of layer il in the background, in order, while free slots last; `keep`
  // lists the resident experts this step still needs (never evicted for it). No-op when mapped.
  void prefetch(int il, const int32_t* experts, int64_t n, const int32_t* keep, int64_t n_keep) override;
  const ExpertCacheStats& stats() const { return stats_; }

  // Bytes of one expert (gate + up + down) in each layer as a slot holds it (repacked when the model is), and of
  // `slots` such buffers over all layers: the memory planner's figures, computed from the weights alone.
  static std::vector<size_t> expert_bytes_per_layer(const ExpertLayout& model);
  static size_t cache_bytes(const ExpertLayout& model, int64_t slots);

  // Fault tests (`tern serve --fault-expert-read N`): the Nth expert read of the process (counted over every
  // store, from 1) fails as an I/O error would; 0: none. Set before any model runs.
  static void fail_read_for_testing(uint64_t nth);

 private:
  enum class SlotState : uint8_t { kReady, kLoading, kFailed };
  struct Layer {
    std::unique_ptr<backend::Buffer> arena;  // slots * expert bytes (backend weights memory)
    size_t expert_bytes = 0;
    std::vector<int32_t> slot_of;      // [n_expert] -> slot, -1 when not resident
    std::vector<int32_t> owner;        // [slots] -> expert, -1 when empty
    std::vector<uint64_t> last_use;    // [slots]
    std::vector<uint8_t> fresh;        // [slots] read for the current step, not yet used (its miss is counted)
    std::vector<SlotState> state;      // [slots], guarded by mu_
    std::vector<std::string> error;    // [slots], guarded by mu_
  };
  struct Job {
    int il;
    int32_t slot;
    int64_t e;
  };
  ExpertMatrices mapped(int il, int64_t e) const;
  static ExpertMatrices slot_views(const ExpertLayout& model, const ExpertMatrices& file, uint8_t* slot);
  int32_t victim(int il, uint64_t protect_from);  // LRU slot not in flight, not fresh, not used since protect_from
  int32_t claim(int il, int64_t e, int32_t slot); // assigns expert e to slot (evicting its owner), counts a miss
  void read_expert(int il, int32_t slot, int64_t e);  // on the calling thread
  void wait_ready(int il, int32_t slot);
  void read_exact(uint8_t* dst, const uint8_t* src_in_map, size_t n);
  void reader_loop();

  const ExpertLayout model_;  // a copy: callers pass a temporary
  int fd_ = -1;
  int64_t slots_ = 0;
  uint64_t clock_ = 0;
  std::vector<Layer> layers_;
  ExpertCacheStats stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread reader_;
};

}  // namespace tern::models
