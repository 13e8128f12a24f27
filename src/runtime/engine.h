// Engine: a loaded model plus the settings every command shares (threads, context size, KV type).
// Every automatic choice (context size, threads, kernel ISA) is logged once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/qwen35moe/forward.h"
#include "models/qwen35moe/weights.h"

namespace tern::runtime {

struct EngineOptions {
  std::string model_path;
  int64_t n_ctx = 0;           // 0: the model's training context, capped by free memory
  int threads = 0;             // 0: all hardware threads
  std::string kv_type = "f16"; // f16 | f32
  std::string dump_dir;        // --dump-tensors DIR: write named intermediates as .npy
};

class Engine {
 public:
  explicit Engine(const EngineOptions& o);
  const models::qwen35moe::Model& model() const { return *model_; }
  const models::qwen35moe::Config& config() const { return model_->config; }
  int64_t n_ctx() const { return n_ctx_; }
  ops::KvType kv_type() const { return kv_type_; }
  std::unique_ptr<models::qwen35moe::SequenceState> new_sequence() const;
  models::qwen35moe::Forward& forward() { return *forward_; }

  // Feeds tokens to one sequence; returns the logits of the last token (or of every token if all_logits).
  const std::vector<float>& eval(models::qwen35moe::SequenceState& seq, const std::vector<int32_t>& tokens,
                                 bool all_logits = false);

 private:
  std::unique_ptr<models::qwen35moe::Model> model_;
  std::unique_ptr<models::qwen35moe::Forward> forward_;
  int64_t n_ctx_ = 0;
  ops::KvType kv_type_ = ops::KvType::kF16;
};

// Parses "1,2,3" (also spaces) into token ids; throws Error naming the bad item.
std::vector<int32_t> parse_token_list(const std::string& s);

}  // namespace tern::runtime
