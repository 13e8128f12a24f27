// The model interface: all that runtime/, serve/ and cli/ know of a model. An architecture is a folder under
// models/ that implements ModelShape (what a GGUF's header says: geometry, state layout, memory figures; no
// tensor data read) and Model (the loaded weights and their forward), plus one line in models/registry.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/comm.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "models/dump.h"
#include "models/sequence_state.h"

namespace tern::models {

struct ModelInfo {
  std::string arch;            // general.architecture
  int64_t n_layer = 0;         // trunk layers (MTP blocks not counted)
  int64_t n_embd = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_expert = 0;        // routed experts per layer (0: dense FFN)
  int64_t n_expert_used = 0;
  int64_t n_mtp = 0;           // multi-token-prediction (nextn) blocks in the file
  bool mtp_drafts = false;     // tern drafts with the first of them (speculative decoding) for this architecture
  std::string summary;         // one line for the load log, e.g. "8 layers (2 attention, 6 DeltaNet), 16 experts top-2"
};

// The fields every architecture's Config names alike (arch, n_layer, n_embd, n_vocab, n_ctx_train, n_expert,
// n_expert_used, n_nextn); the architecture fills in mtp_drafts and summary.
template <class Config>
ModelInfo common_model_info(const Config& c) {
  ModelInfo i;
  i.arch = c.arch;
  i.n_layer = c.n_layer;
  i.n_embd = c.n_embd;
  i.n_vocab = c.n_vocab;
  i.n_ctx_train = c.n_ctx_train;
  i.n_expert = c.n_expert;
  i.n_expert_used = c.n_expert_used;
  i.n_mtp = c.n_nextn;
  return i;
}

// Resident weight bytes as the model would hold them (repacked or in the file's layout), from the header alone.
struct WeightBytes {
  uint64_t dense = 0;                  // read in full every token: embeddings, mixers, routers, shared experts, head
  uint64_t experts = 0;                // all routed experts
  std::vector<uint64_t> expert_bytes;  // [n_layer] one routed expert (all its matrices) of each layer
  bool repacked = false;               // some matrices are held repacked (anonymous memory)
  uint64_t mtp = 0;                    // of dense + experts: the MTP block that drafts (0: none)
};

// Which matrices are repacked for the kernels at load (quant/repack.h): none, all but the routed experts
// (they are streamed, and repacked as each is read into its cache slot), or all.
enum class RepackScope { kNone, kDense, kAll };

struct RepackReport {
  int64_t matrices = 0;         // matrices repacked
  uint64_t bytes = 0;           // their repacked bytes (anonymous memory)
  uint64_t file_bytes = 0;      // the file bytes they replace, given back
  std::vector<std::string> kept;  // matrices left in the file layout, with the reason
};

struct ExpertCacheStats {
  uint64_t hits = 0, misses = 0, bytes_read = 0;
  double read_seconds = 0;  // time the forward waited on reads
};

// One sequence's new tokens in a forward batch.
struct SeqInput {
  SequenceState* state = nullptr;
  std::vector<int32_t> tokens;  // new tokens, appended at state->n_past()
  bool all_logits = false;      // logits for every new token (teacher forcing) or only the last
  bool hidden = false;          // also keep the final-normed hidden state of every new token (Model::hidden())
};

// One sequence's rows for the draft (MTP) block: each token paired with a hidden state (the trunk's final-normed
// hidden state of the position before it, or the draft block's own output for a chained draft). The rows are
// appended to state->draft(), whose positions are its own.
struct DraftInput {
  SequenceState* state = nullptr;
  std::vector<int32_t> tokens;
  std::vector<float> hidden;  // [tokens.size(), n_embd]
  bool all_logits = false;
};

// Which logits columns the last forward() / forward_draft() returned: [first, first + count) of n_vocab. All of
// them (comm null) unless the model runs across ranks with local logits on (Model::set_local_logits): then this
// rank's share of the vocabulary, and `comm` reaches the other ranks' shares (runtime::LogitsRow reduces them).
struct LogitsShare {
  int64_t first = 0, count = 0;
  Comm* comm = nullptr;
};

// How Model::distribute splits routed experts across ranks.
// How an MLA model (glm-dsa) runs a segment's attention (models/blocks/mla.h): kAuto chooses per segment by a
// measured rule; the others force the absorbed form (queries through W_UK, one latent head; decode's form) or the
// expanded one (per-head keys and values expanded from the latent rows) wherever a segment attends every key.
enum class MlaForm { kAuto, kAbsorbed, kExpanded };
const char* mla_form_name(MlaForm f);               // "auto", "absorbed", "expanded"
bool parse_mla_form(const std::string& s, MlaForm* f);  // false for another name

struct SplitOptions {
  // Expert parallel: each rank holds 1/N of the experts, whole, and a layer's output is summed over ranks (at batch
  // 1 the rank holding most of the token's top-k sets the pace). Default: every rank holds 1/N of the rows of every
  // expert (balanced at any batch, and exact: values are gathered, not summed in a new order).
  bool whole_experts = false;
  // Routed experts stay views into the mapped file (a streamed expert is read from it, this rank's rows only) instead
  // of copies of this rank's rows gathered at start: for --mem-budget / --expert-cache across ranks. Such experts
  // are not repacked at load (streamed ones are as they are read).
  bool experts_in_file = false;
  // Out projections split by columns instead of rows (blocks/tensor_split.h, MoeSplit): each rank multiplies its heads'
  // (its SwiGLU rows') activations by its columns of the attention / DeltaNet out projection and of every down, and
  // each block's output is one sum over ranks: 2 collectives a layer instead of 4, not one process's bits. Blocks
  // whose columns do not split on the weight type's block boundaries, and streamed experts, keep the row split.
  bool partial_sums = false;
};

class ModelShape {
 public:
  virtual ~ModelShape() = default;
  virtual const gguf::File& file() const = 0;
  virtual const ModelInfo& info() const = 0;
  virtual StateShape state_shape() const = 0;
  // Forward scratch and logits for batches of up to `rows` rows over `n_parallel` sequences, in bytes.
  virtual uint64_t buffer_bytes(int64_t rows, int n_parallel) const = 0;
  // Weight bytes, repacked or in the file's layout; `repack_experts` says whether routed experts are repacked.
  virtual WeightBytes weight_bytes(bool repack, bool repack_experts) const = 0;
  // The shape of one rank's share when split over `ranks` (Model::distribute; tern plan --ranks): its weights, state
  // and buffers. Null: the architecture does not split.
  virtual std::unique_ptr<ModelShape> rank_shape(int ranks) const {
    (void)ranks;
    return nullptr;
  }
};

class Model : public ModelShape {
 public:
  // Where the weights, forward scratch and sequence states live and the forward runs; sequence states for this
  // model are made on it (SequenceState(model.backend(), model.state_shape(), ...)).
  virtual backend::Backend& backend() = 0;
  // Splits the model's work across the ranks of `comm` (every rank holds the same model and calls this with the
  // same arguments): afterwards this rank keeps only its share of the weights it splits, and forward() exchanges
  // partial results so that every rank returns the same logits. Before repack(), once; `comm` outlives the model.
  // An architecture that cannot split refuses more than one rank.
  virtual void distribute(Comm& comm, const SplitOptions& opt = {}) {
    (void)opt;
    if (comm.size() > 1) fail("%s: this architecture does not run across ranks yet (%d ranks)", info().arch.c_str(), comm.size());
  }
  // Repacks the matrices in `scope` into the kernels' layout and gives back the file pages they came from. Once,
  // before start().
  virtual RepackReport repack(RepackScope scope) = 0;
  // Makes the model ready to run: named intermediates go to `dump`; expert_slots > 0 streams routed experts
  // through a cache of that many per layer (0: read from the mapped file). Outputs are identical either way.
  virtual void start(TensorDump dump, int64_t expert_slots) = 0;
  // One forward over every sequence's new tokens; advances their states. Returns logits rows [n_out, n_vocab] in
  // sequence order (all rows or the last row of each sequence). Throws Error (without touching any state) if a
  // token id is out of range or a sequence would pass its context size.
  virtual const std::vector<float>& forward(std::vector<SeqInput>& batch) = 0;
  // Hidden rows [n, n_embd] of the last forward (every new token of the sequences that asked, in order) or of the
  // last forward_draft (every row: the draft block's output, which feeds its next step).
  virtual const std::vector<float>& hidden() const = 0;
  // Whether the model can draft (the file has an MTP block); states then carry a draft() state.
  virtual bool can_draft() const = 0;
  // --mla-form: before start(). An architecture without MLA attention refuses any form but kAuto.
  virtual void set_mla_form(MlaForm form) {
    if (form != MlaForm::kAuto)
      fail("--mla-form %s: %s has no multi-head latent attention (glm-dsa has)", mla_form_name(form), info().arch.c_str());
  }
  // One forward of the draft block over every sequence's rows; advances their draft states. Returns logits rows
  // like forward(). Throws Error (without touching any state) for a model without a draft block, a row count
  // mismatch, a token out of range or a draft state past its context.
  virtual const std::vector<float>& forward_draft(std::vector<DraftInput>& batch) = 0;
  // Across ranks (after distribute()): with `on`, forward() and forward_draft() return rows of this rank's own
  // vocabulary columns [n_out, logits_share().count] instead of gathering every rank's: a caller that samples
  // reduces candidates across ranks (runtime::Sampler, runtime::argmax on a LogitsRow) instead of moving n_vocab
  // floats per row. Off by default; no effect where the LM head is not split.
  virtual void set_local_logits(bool on) { (void)on; }
  virtual bool local_logits() const { return false; }
  virtual LogitsShare logits_share() const { return {0, info().n_vocab, nullptr}; }
  virtual bool experts_streamed() const = 0;
  virtual int64_t expert_slots() const = 0;
  virtual ExpertCacheStats expert_stats() const = 0;
};

// Local logits (Model::set_local_logits) for the life of this object, then as before.
class LocalLogits {
 public:
  explicit LocalLogits(Model& m) : m_(m), was_(m.local_logits()) { m_.set_local_logits(true); }
  ~LocalLogits() { m_.set_local_logits(was_); }
  LocalLogits(const LocalLogits&) = delete;
  LocalLogits& operator=(const LocalLogits&) = delete;

 private:
  Model& m_;
  bool was_;
};

}  // namespace tern::models
