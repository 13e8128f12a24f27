#include "models/expert_store.h"

#include <atomic>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace tern::models {

ExpertStore::ExpertStore(const ExpertLayout& model) : model_(model) {}

ExpertStore::ExpertStore(const ExpertLayout& model, int64_t slots) : model_(model), slots_(slots) {
  if (slots < 1 || slots > model.n_expert)
    fail("expert cache: %lld slots per layer, expected 1..%lld (the model's expert count)",
         static_cast<long long>(slots), static_cast<long long>(model.n_expert));
  if (model.repack_scope == RepackScope::kAll)
    fail("internal: experts repacked at load cannot be streamed (repack with RepackScope::kDense)");
  const std::string& path = model.file->name();
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("%s: cannot open for expert streaming: %s", path.c_str(), std::strerror(errno));
  const std::vector<size_t> bytes = expert_bytes_per_layer(model);
  const size_t n = static_cast<size_t>(slots);
  layers_.resize(bytes.size());
  for (size_t il = 0; il < bytes.size(); ++il) {
    Layer& L = layers_[il];
    L.expert_bytes = bytes[il];
    // Large buffers are anonymous mappings: pages stay unbacked until an expert is read into them.
    if (bytes[il] == 0) continue;  // a layer without routed experts
    L.arena = model.backend->alloc(backend::BufferKind::kWeights, bytes[il] * n);
    L.slot_of.assign(static_cast<size_t>(model.n_expert), -1);
    L.owner.assign(n, -1);
    L.last_use.assign(n, 0);
    L.fresh.assign(n, 0);
    L.state.assign(n, SlotState::kReady);
    L.error.assign(n, std::string());
  }
  reader_ = std::thread([this] { reader_loop(); });
}

ExpertStore::~ExpertStore() {
  if (reader_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    reader_.join();
  }
  if (fd_ >= 0) ::close(fd_);
}

// The views of an expert held in a slot: gate, up and down back to back, each repacked when the model is
// repacked and the matrix can be (else the file's bytes).
ExpertMatrices ExpertStore::slot_views(const ExpertLayout& model, const ExpertMatrices& file, uint8_t* slot) {
  const bool repack = model.repack_scope != RepackScope::kNone && model.rows_grouped;
  ExpertMatrices x = file;
  size_t off = 0;
  for (Linear* m : {&x.gate, &x.up, &x.down}) {
    m->repacked = repack && model.backend->can_repack(*m);
    m->data = slot + off;
    off += m->bytes();
  }
  return x;
}

std::vector<size_t> ExpertStore::expert_bytes_per_layer(const ExpertLayout& model) {
  std::vector<size_t> out;
  for (const MoeWeights* m : model.layers) {
    if (!m) {  // no routed experts in this layer: no slots
      out.push_back(0);
      continue;
    }
    const ExpertMatrices x = slot_views(
        model, {m->expert_gate(m->expert0, model.n_ff_exp), m->expert_up(m->expert0, model.n_ff_exp), m->expert_down(m->expert0, model.n_embd)},
        nullptr);
    out.push_back(x.gate.bytes() + x.up.bytes() + x.down.bytes());
  }
  return out;
}

size_t ExpertStore::cache_bytes(const ExpertLayout& model, int64_t slots) {
  size_t total = 0;
  for (size_t b : expert_bytes_per_layer(model)) total += b * static_cast<size_t>(slots);
  return total;
}

ExpertMatrices ExpertStore::mapped(int il, int64_t e) const {
  const MoeWeights* m = il >= 0 && il < static_cast<int>(model_.layers.size()) ? model_.layers[static_cast<size_t>(il)] : nullptr;
  if (!m) fail("internal: layer %d has no routed experts (%zu layers)", il, model_.layers.size());
  return {m->expert_gate(e, model_.n_ff_exp), m->expert_up(e, model_.n_ff_exp), m->expert_down(e, model_.n_embd)};
}

int32_t ExpertStore::victim(int il, uint64_t protect_from) {
  Layer& L = layers_[il];
  std::lock_guard<std::mutex> lk(mu_);
  int32_t best = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(L.owner.size()); ++s) {
    if (L.state[s] == SlotState::kLoading || L.fresh[s] || L.last_use[s] >= protect_from) continue;
    if (best < 0 || L.last_use[s] < L.last_use[best]) best = s;
  }
  return best;
}

int32_t ExpertStore::claim(int il, int64_t e, int32_t slot) {
  Layer& L = layers_[il];
  if (L.owner[slot] >= 0) L.slot_of[L.owner[slot]] = -1;
  L.owner[slot] = static_cast<int32_t>(e);
  L.slot_of[e] = slot;
  L.last_use[slot] = ++clock_;
  ++stats_.misses;
  stats_.bytes_read += L.expert_bytes;
  return slot;
}

void ExpertStore::prefetch(int il, const int32_t* experts, int64_t n, const int32_t* keep, int64_t n_keep) {
  if (!streamed()) return;
  Layer& L = layers_[il];
  const uint64_t step = clock_ + 1;
  for (int64_t i = 0; i < n_keep; ++i)
    if (const int32_t slot = L.slot_of[keep[i]]; slot >= 0) L.last_use[slot] = ++clock_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = experts[i];
    if (L.slot_of[e] >= 0) continue;
    const int32_t slot = victim(il, step);
    if (slot < 0) break;  // the rest are read on demand, into slots this step has finished with
    claim(il, e, slot);
    L.fresh[slot] = 1;
    {
      std::lock_guard<std::mutex> lk(mu_);
      L.state[slot] = SlotState::kLoading;
      jobs_.push_back({il, slot, e});
    }
    cv_.notify_all();
  }
}

void ExpertStore::wait_ready(int il, int32_t slot) {
  Layer& L = layers_[il];
  std::unique_lock<std::mutex> lk(mu_);
  if (L.state[slot] == SlotState::kLoading) {
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lk, [&] { return L.state[slot] != SlotState::kLoading; });
    stats_.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (L.state[slot] == SlotState::kFailed) {
    const std::string err = L.error[slot];
    L.state[slot] = SlotState::kReady;
    L.slot_of[L.owner[slot]] = -1;
    L.owner[slot] = -1;
    L.fresh[slot] = 0;
    lk.unlock();
    fail("%s", err.c_str());
  }
}

ExpertMatrices ExpertStore::get(int il, int64_t e) {
  if (!streamed()) return mapped(il, e);
  Layer& L = layers_[il];
  int32_t slot = L.slot_of[e];
  if (slot >= 0) {
    wait_ready(il, slot);
    if (L.fresh[slot]) L.fresh[slot] = 0;  // read by prefetch for this use: its miss is already counted
    else ++stats_.hits;
  } else {
    slot = victim(il, UINT64_MAX);
    if (slot < 0) {  // every slot is in flight or unused yet: let the reads finish, then take the LRU one
      for (int32_t s = 0; s < static_cast<int32_t>(L.owner.size()); ++s) wait_ready(il, s);
      slot = 0;
      for (int32_t s = 1; s < static_cast<int32_t>(L.owner.size()); ++s)
        if (L.last_use[s] < L.last_use[slot]) slot = s;
      L.fresh[slot] = 0;
    }
    claim(il, e, slot);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      read_expert(il, slot, e);
    } catch (...) {
      L.slot_of[e] = -1;
      L.owner[slot] = -1;
      throw;
    }
    stats_.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  L.last_use[slot] = ++clock_;
  return slot_views(model_, mapped(il, e), L.arena->data() + static_cast<size_t>(slot) * L.expert_bytes);
}

namespace {
std::atomic<uint64_t> g_fail_read_at{0}, g_reads{0};
}  // namespace

void ExpertStore::fail_read_for_testing(uint64_t nth) {
  g_fail_read_at = nth;
  g_reads = 0;
}

void ExpertStore::read_expert(int il, int32_t slot, int64_t e) {
  if (const uint64_t at = g_fail_read_at.load(std::memory_order_relaxed); at && ++g_reads == at)
    fail("%s: reading expert %lld of layer %d: input/output error (injected by --fault-expert-read)",
         model_.file->name().c_str(), static_cast<long long>(e), il);
  Layer& L = layers_[il];
  const ExpertMatrices file = mapped(il, e);
  const ExpertMatrices x = slot_views(model_, file, L.arena->data() + static_cast<size_t>(slot) * L.expert_bytes);
  thread_local std::vector<uint8_t> staging;  // file bytes of a matrix that is repacked into the slot
  for (auto [src, dst] : {std::pair{&file.gate, &x.gate}, {&file.up, &x.up}, {&file.down, &x.down}}) {
    if (!dst->repacked) {
      read_exact(const_cast<uint8_t*>(dst->data), src->data, src->bytes());
      continue;
    }
    if (staging.size() < src->bytes()) staging.resize(src->bytes());
    read_exact(staging.data(), src->data, src->bytes());
    Linear staged = *src;
    staged.data = staging.data();
    model_.backend->repack_into(staged, const_cast<uint8_t*>(dst->data), false);  // stateless: any thread
  }
}

void ExpertStore::reader_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const Job j = jobs_.front();
    jobs_.pop_front();
    lk.unlock();
    std::string err;
    try {
      read_expert(j.il, j.slot, j.e);
    } catch (const std::exception& ex) {
      err = ex.what();
    }
    lk.lock();
    layers_[j.il].state[j.slot] = err.empty() ? SlotState::kReady : SlotState::kFailed;
    layers_[j.il].error[j.slot] = std::move(err);
    cv_.notify_all();
  }
}

// Reads the file bytes behind a view into the mapping, with pread (the mapping itself is never touched).
void ExpertStore::read_exact(uint8_t* dst, const uint8_t* src_in_map, size_t n) {
  const gguf::File& f = *model_.file;
  off_t off = static_cast<off_t>(src_in_map - f.base());
  while (n > 0) {
    const ssize_t got = ::pread(fd_, dst, n, off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail("%s: reading %zu expert bytes at offset %lld: %s", f.name().c_str(), n, static_cast<long long>(off),
           got < 0 ? std::strerror(errno) : "unexpected end of file (was it changed while tern ran?)");
    dst += got;
    off += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace tern::models
