#include "runtime/engine.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "quant/kernels.h"

namespace tern::runtime {

using models::qwen35moe::Model;
using models::qwen35moe::SequenceState;

namespace {

double available_memory_bytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * page : 4e9;
}

// Reads the mapped file into the page cache once, in order, with a progress bar on a terminal, so the first
// tokens do not pay a storm of page faults. A file larger than half the available memory is left to fault
// in on demand (reading it all would only evict itself).
void warm_pages(const gguf::File& f) {
  const uint64_t total = f.file_size();
  if (static_cast<double>(total) > available_memory_bytes() / 2) {
    log::info("%s: %.1f GiB is more than half the available memory; weights are read on demand", f.name().c_str(),
              total / 1073741824.0);
    return;
  }
  constexpr uint64_t kSlice = uint64_t{64} << 20;  // a multiple of the page size, so slices stay page-aligned
  const long page = std::max(sysconf(_SC_PAGESIZE), 512L);
  ProgressBar bar("loading");
  const uint8_t* base = f.base();
  uint8_t sink = 0;
  for (uint64_t off = 0; off < total; off += kSlice) {
    const uint64_t n = std::min(kSlice, total - off);
    madvise(const_cast<uint8_t*>(base + off), n, MADV_WILLNEED);  // advisory; failure only costs speed
    for (uint64_t i = 0; i < n; i += static_cast<uint64_t>(page)) sink ^= base[off + i];
    bar.update(off + n, total);
  }
  asm volatile("" : : "r"(sink));  // keep the reads
}

}  // namespace

Engine::Engine(const EngineOptions& o) {
  if (o.threads < 0) fail("--threads must be >= 0 (got %d)", o.threads);
  set_n_threads(o.threads);
  if (o.kv_type == "f16") kv_type_ = ops::KvType::kF16;
  else if (o.kv_type == "f32") kv_type_ = ops::KvType::kF32;
  else fail("--kv-type '%s' is not supported (supported: f16, f32)", o.kv_type.c_str());
  if (o.n_ctx < 0) fail("-c/--ctx-size must be >= 0 (got %lld)", static_cast<long long>(o.n_ctx));

  model_ = Model::load(o.model_path);
  warm_pages(*model_->file);
  const auto& c = model_->config;
  if (o.n_ctx > 0) {
    n_ctx_ = o.n_ctx;
  } else {
    // Default: the training context, capped so one sequence's state fits in half the available memory.
    const double avail = available_memory_bytes();
    n_ctx_ = c.n_ctx_train;
    while (n_ctx_ > 256 && static_cast<double>(SequenceState::bytes_for(c, n_ctx_, kv_type_)) > avail / 2) n_ctx_ /= 2;
    log::info("context size %lld (model trained for %lld%s)", static_cast<long long>(n_ctx_),
              static_cast<long long>(c.n_ctx_train), n_ctx_ < c.n_ctx_train ? ", capped by available memory" : "");
  }
  log::info("%s: %s, %lld layers (%lld attention, %lld DeltaNet), %lld experts top-%lld, %d threads, kernels %s",
            o.model_path.c_str(), c.arch.c_str(), static_cast<long long>(c.n_layer),
            static_cast<long long>(c.n_attention_layers()), static_cast<long long>(c.n_deltanet_layers()),
            static_cast<long long>(c.n_expert), static_cast<long long>(c.n_expert_used), n_threads(),
            isa_name(quant::active_isa()));
  models::TensorDump dump;
  if (!o.dump_dir.empty()) dump = models::TensorDump(o.dump_dir);
  forward_ = std::make_unique<models::qwen35moe::Forward>(*model_, std::move(dump));
}

std::unique_ptr<SequenceState> Engine::new_sequence() const {
  return std::make_unique<SequenceState>(model_->config, n_ctx_, kv_type_);
}

const std::vector<float>& Engine::eval(SequenceState& seq, const std::vector<int32_t>& tokens, bool all_logits) {
  std::vector<models::qwen35moe::SeqInput> batch(1);
  batch[0].state = &seq;
  batch[0].tokens = tokens;
  batch[0].all_logits = all_logits;
  return forward_->run(batch);
}

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ',' || s[i] == ' ')) ++i;
    if (i >= s.size()) break;
    size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != ' ') ++j;
    std::string item = s.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (end != item.c_str() + item.size() || errno || v < 0 || v > INT32_MAX)
      fail("--tokens: '%s' is not a token id (expected non-negative integers separated by commas)", item.c_str());
    out.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (out.empty()) fail("--tokens: no token ids given");
  return out;
}

}  // namespace tern::runtime
