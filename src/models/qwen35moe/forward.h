// The Qwen3.5-MoE forward pass over a batch of sequences (each with its own state): embeddings, the layer
// loop (RMSNorm -> DeltaNet or gated attention -> residual -> RMSNorm -> MoE -> residual), final norm and
// LM head. Reads like contract section 6; the blocks live in models/blocks/.
#pragma once
#include <cstdint>
#include <vector>

#include "models/batch_io.h"
#include "models/blocks/attention.h"
#include "models/blocks/deltanet.h"
#include "models/blocks/moe.h"
#include "models/dump.h"
#include "models/model.h"
#include "models/expert_store.h"
#include "models/qwen35moe/state.h"
#include "models/qwen35moe/weights.h"

namespace tern::models::qwen35moe {

class Forward {
 public:
  // expert_slots: 0 reads routed experts from the mapped file; N >= 1 streams them through a cache of N
  // experts per layer (ExpertStore). Outputs are identical either way.
  explicit Forward(const Model& model, TensorDump dump = {}, int64_t expert_slots = 0);
  const ExpertStore& experts() const { return *experts_; }

  // Runs one forward over every sequence's new tokens and advances their states. Returns logits rows
  // [n_out, n_vocab] in sequence order (all rows or the last row of each sequence). Throws Error (without
  // touching any state) if a token id is out of range or a sequence would pass its context size.
  const std::vector<float>& run(std::vector<SeqInput>& batch);
  // The MTP block over (token, hidden) rows appended to each sequence's draft state (models/model.h DraftInput).
  const std::vector<float>& run_draft(std::vector<DraftInput>& batch);
  const std::vector<float>& hidden() const { return hidden_; }
  // Local logits across ranks (models/model.h Model::set_local_logits) and the columns the last head returned.
  void set_local_logits(bool on) { local_logits_ = on; }
  bool local_logits() const { return local_logits_; }
  const LogitsShare& logits_share() const { return share_; }

 private:
  void layer(int il, const std::vector<Segment>& segs, int64_t n_rows);

  const Model& model_;
  backend::Backend& be_;
  const Config& c_;
  const AttentionParams attn_params_;
  const DeltaNetParams dn_params_;
  const MoeParams moe_params_;
  TensorDump dump_;
  std::unique_ptr<ExpertStore> experts_;
  // Final norm of out_index_'s rows of x_ (all rows normed when `all_normed`), LM head `head`, logits to the host.
  // vocab: the head's rows are these token ids only (a draft vocabulary); the other logits are -inf.
  const std::vector<float>& head(const Linear& head, const float* norm_w, int64_t n_rows, bool keep_hidden,
                                 const std::vector<int32_t>* vocab = nullptr);

  Scratch x_, cur_, mix_, logits_dev_;
  OutputNormScratch out_norm_;
  MtpInputScratch mtp_in_;
  std::vector<int64_t> out_index_;  // host: batch rows that get logits
  std::vector<int64_t> hid_index_;  // host: batch rows whose hidden state is kept
  std::vector<float> logits_;       // host copy of the logits
  std::vector<float> hidden_;       // host copy of the kept hidden rows
  std::vector<float> sub_logits_;   // host: logits over a draft vocabulary
  std::vector<float> reduce_;       // host: every rank's partial FFN sums (distributed)
  std::vector<float> part_, gathered_;  // host: this rank's logits rows, every rank's (distributed)
  bool local_logits_ = false;
  LogitsShare share_;
  AttentionScratch attn_;
  DeltaNetScratch dn_;
  MoeScratch moe_;
  FfnScratch ffn_;
};

}  // namespace tern::models::qwen35moe
