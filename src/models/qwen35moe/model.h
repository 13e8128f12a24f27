// Qwen3.5/3.6-MoE behind the model interface (models/model.h): Shape answers from the GGUF header, LoadedModel
// holds the weights and the forward.
#pragma once
#include <memory>
#include <string>

#include "models/model.h"
#include "models/qwen35moe/config.h"
#include "models/qwen35moe/forward.h"
#include "models/qwen35moe/weights.h"

namespace tern::models::qwen35moe {

ModelInfo model_info(const Config& c);
// Forward scratch per batch row, mirroring the buffers Forward and the blocks grow, plus the logits.
uint64_t buffer_bytes(const Config& c, int64_t rows, int n_parallel);
WeightBytes weight_bytes(const gguf::File& f, const Config& c, bool repack, bool repack_experts);

// Weight bytes of rank 0's share of a model split over `ranks` (models/model.h ModelShape::rank_shape): each tensor
// counted at the fraction of it that rank holds (local: rank_config of c).
WeightBytes rank_weight_bytes(const gguf::File& f, const Config& c, const Config& local, int ranks, bool repack,
                              bool repack_experts);

class Shape : public ModelShape {
 public:
  explicit Shape(const gguf::File& f) : f_(f), c_(Config::from_gguf(f)), info_(model_info(c_)) {}
  // Rank 0's share of the model split over `ranks` (the ranks' shares differ by a few rows at most).
  Shape(const gguf::File& f, int ranks) : Shape(f) {
    ranks_ = ranks;
    local_ = rank_config(c_, ranks, 0);
  }
  std::unique_ptr<ModelShape> rank_shape(int ranks) const override { return std::make_unique<Shape>(f_, ranks); }
  const gguf::File& file() const override { return f_; }
  const ModelInfo& info() const override { return info_; }
  StateShape state_shape() const override;
  uint64_t buffer_bytes(int64_t rows, int n_parallel) const override {
    return qwen35moe::buffer_bytes(ranks_ > 1 ? local_ : c_, rows, n_parallel);
  }
  WeightBytes weight_bytes(bool repack, bool repack_experts) const override {
    return ranks_ > 1 ? rank_weight_bytes(f_, c_, local_, ranks_, repack, repack_experts)
                      : qwen35moe::weight_bytes(f_, c_, repack, repack_experts);
  }

 private:
  const gguf::File& f_;
  Config c_;
  ModelInfo info_;
  int ranks_ = 1;
  Config local_;
};

class LoadedModel : public models::Model {
 public:
  // be: the backend to run on (null: the CPU backend).
  explicit LoadedModel(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be = nullptr);
  backend::Backend& backend() override { return *m_->backend; }
  const qwen35moe::Model& weights() const { return *m_; }

  const gguf::File& file() const override { return *m_->file; }
  const ModelInfo& info() const override { return info_; }
  StateShape state_shape() const override;
  uint64_t buffer_bytes(int64_t rows, int n_parallel) const override {
    return qwen35moe::buffer_bytes(m_->config, rows, n_parallel);
  }
  WeightBytes weight_bytes(bool repack, bool repack_experts) const override {
    return qwen35moe::weight_bytes(*m_->file, m_->config, repack, repack_experts);
  }
  void distribute(Comm& comm, const SplitOptions& opt = {}) override;
  std::unique_ptr<ModelShape> rank_shape(int ranks) const override { return std::make_unique<Shape>(*m_->file, ranks); }
  RepackReport repack(RepackScope scope) override;
  void start(TensorDump dump, int64_t expert_slots) override;
  const std::vector<float>& forward(std::vector<SeqInput>& batch) override;
  const std::vector<float>& hidden() const override;
  bool can_draft() const override { return m_->weights.has_mtp; }
  const std::vector<float>& forward_draft(std::vector<DraftInput>& batch) override;
  void set_local_logits(bool on) override {
    if (fwd_) fwd_->set_local_logits(on);
  }
  bool local_logits() const override { return fwd_ && fwd_->local_logits(); }
  LogitsShare logits_share() const override { return fwd_ ? fwd_->logits_share() : Model::logits_share(); }
  bool experts_streamed() const override { return fwd_ && fwd_->experts().streamed(); }
  int64_t expert_slots() const override { return fwd_ ? fwd_->experts().slots() : 0; }
  ExpertCacheStats expert_stats() const override { return fwd_ ? fwd_->experts().stats() : ExpertCacheStats{}; }

 private:
  std::unique_ptr<qwen35moe::Model> m_;
  ModelInfo info_;
  std::unique_ptr<Forward> fwd_;
};

}  // namespace tern::models::qwen35moe
