// GLM-5 (glm-dsa) behind the model interface (models/model.h): Shape answers from the GGUF header, LoadedModel holds
// the weights and the forward.
#pragma once
#include <memory>

#include "models/glm_dsa/config.h"
#include "models/glm_dsa/forward.h"
#include "models/glm_dsa/weights.h"
#include "models/model.h"

namespace tern::models::glm_dsa {

ModelInfo model_info(const Config& c);
// Per layer: the latent cache rows [n_ctx, kv_lora + rope] as K and, for a layer with its own indexer, the indexer's
// keys [n_ctx, idx_dim] as V (docs/STATE_LAYOUT.md). No recurrent state.
StateShape state_shape(const Config& c);
uint64_t buffer_bytes(const Config& c, int64_t rows, int n_parallel);
WeightBytes weight_bytes(const gguf::File& f, const Config& c, bool repack, bool repack_experts);

class Shape : public ModelShape {
 public:
  explicit Shape(const gguf::File& f) : f_(f), c_(Config::from_gguf(f)), info_(model_info(c_)) {}
  const gguf::File& file() const override { return f_; }
  const ModelInfo& info() const override { return info_; }
  StateShape state_shape() const override { return glm_dsa::state_shape(c_); }
  uint64_t buffer_bytes(int64_t rows, int n_parallel) const override { return glm_dsa::buffer_bytes(c_, rows, n_parallel); }
  WeightBytes weight_bytes(bool repack, bool repack_experts) const override {
    return glm_dsa::weight_bytes(f_, c_, repack, repack_experts);
  }

 private:
  const gguf::File& f_;
  Config c_;
  ModelInfo info_;
};

class LoadedModel : public models::Model {
 public:
  explicit LoadedModel(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be = nullptr);
  backend::Backend& backend() override { return *m_->backend; }
  const gguf::File& file() const override { return *m_->file; }
  const ModelInfo& info() const override { return info_; }
  StateShape state_shape() const override { return glm_dsa::state_shape(m_->config); }
  uint64_t buffer_bytes(int64_t rows, int n_parallel) const override {
    return glm_dsa::buffer_bytes(m_->config, rows, n_parallel);
  }
  WeightBytes weight_bytes(bool repack, bool repack_experts) const override {
    return glm_dsa::weight_bytes(*m_->file, m_->config, repack, repack_experts);
  }
  RepackReport repack(RepackScope scope) override;
  void set_mla_form(MlaForm form) override;
  void start(TensorDump dump, int64_t expert_slots) override;
  const std::vector<float>& forward(std::vector<SeqInput>& batch) override;
  const std::vector<float>& hidden() const override;
  bool can_draft() const override { return m_->config.mtp_drafts(); }
  const std::vector<float>& forward_draft(std::vector<DraftInput>& batch) override;
  bool experts_streamed() const override { return fwd_ && fwd_->experts().streamed(); }
  int64_t expert_slots() const override { return fwd_ ? fwd_->experts().slots() : 0; }
  ExpertCacheStats expert_stats() const override { return fwd_ ? fwd_->experts().stats() : ExpertCacheStats{}; }

 private:
  std::unique_ptr<glm_dsa::Model> m_;
  ModelInfo info_;
  std::unique_ptr<Forward> fwd_;
};

}  // namespace tern::models::glm_dsa
