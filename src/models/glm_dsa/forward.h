// The GLM-5 forward over a batch of sequences: embeddings, the layer loop (RMSNorm -> MLA with the sparse-attention
// indexer -> residual -> RMSNorm -> dense FFN or sigmoid-routed MoE -> residual), final norm and LM head. Reads like
// contract section 4; the blocks live in models/blocks/.
#pragma once
#include <vector>

#include "models/blocks/ffn.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"
#include "models/dump.h"
#include "models/glm_dsa/weights.h"
#include "models/model.h"

namespace tern::models::glm_dsa {

// Routed experts read from the mapped file (streaming is not implemented for glm-dsa yet).
class MappedExperts : public ExpertSource {
 public:
  explicit MappedExperts(const Model& m) : m_(m) {}
  bool streamed() const override { return false; }
  ExpertMatrices get(int il, int64_t e) override;
  bool resident(int, int64_t) const override { return true; }
  void prefetch(int, const int32_t*, int64_t, const int32_t*, int64_t) override {}

 private:
  const Model& m_;
};

class Forward {
 public:
  explicit Forward(const Model& model, TensorDump dump = {});
  // One forward over every sequence's new tokens (models/model.h Model::forward).
  const std::vector<float>& run(std::vector<SeqInput>& batch);
  const std::vector<float>& hidden() const { return hidden_; }

 private:
  void layer(int il, const std::vector<Segment>& segs, int64_t n_rows);

  const Model& model_;
  backend::Backend& be_;
  const Config& c_;
  const MlaParams mla_params_;
  const MoeParams moe_params_;
  TensorDump dump_;
  MappedExperts experts_;
  Scratch x_, cur_, mix_, out_rows_, logits_dev_, normed_, hid_rows_;
  std::vector<int64_t> out_index_, hid_index_;
  std::vector<float> logits_, hidden_;
  MlaScratch mla_;
  MoeScratch moe_;
  FfnScratch ffn_;
};

}  // namespace tern::models::glm_dsa
