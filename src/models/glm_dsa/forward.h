// The GLM-5 forward over a batch of sequences: embeddings, the layer loop (RMSNorm -> MLA with the sparse-attention
// indexer -> residual -> RMSNorm -> dense FFN or sigmoid-routed MoE -> residual), final norm and LM head. Reads like
// contract section 4; the blocks live in models/blocks/.
#pragma once
#include <vector>

#include "models/batch_io.h"
#include "models/blocks/ffn.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"
#include "models/dump.h"
#include "models/glm_dsa/weights.h"
#include "models/model.h"

namespace tern::models::glm_dsa {

class Forward {
 public:
  // expert_slots: 0 reads routed experts from the mapped file; N >= 1 streams them through a cache of N experts per
  // layer (models/expert_store.h). Outputs are identical either way.
  explicit Forward(const Model& model, TensorDump dump = {}, int64_t expert_slots = 0);
  const ExpertStore& experts() const { return *experts_; }
  // One forward over every sequence's new tokens (models/model.h Model::forward).
  const std::vector<float>& run(std::vector<SeqInput>& batch);
  // One forward of the MTP block over every sequence's draft rows (models/model.h Model::forward_draft).
  const std::vector<float>& run_draft(std::vector<DraftInput>& batch);
  const std::vector<float>& hidden() const { return hidden_; }

 private:
  void layer(int il, const std::vector<Segment>& segs, int64_t n_rows);
  // Final norm (norm_w) and LM head w over the rows in out_index_ (hidden rows: hid_index_); returns host logits.
  const std::vector<float>& head(const Linear& w, const float* norm_w, int64_t n_rows);

  const Model& model_;
  backend::Backend& be_;
  const Config& c_;
  const MlaParams mla_params_;
  const MoeParams moe_params_;
  TensorDump dump_;
  std::unique_ptr<ExpertStore> experts_;
  Scratch x_, cur_, mix_, logits_dev_;
  OutputNormScratch out_norm_;
  MtpInputScratch mtp_in_;
  std::vector<int64_t> out_index_, hid_index_;
  std::vector<float> logits_, hidden_;
  MlaScratch mla_;
  MoeScratch moe_;
  FfnScratch ffn_;
};

}  // namespace tern::models::glm_dsa
