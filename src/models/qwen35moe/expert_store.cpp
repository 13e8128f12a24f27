#include "models/qwen35moe/expert_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace tern::models::qwen35moe {

ExpertStore::ExpertStore(const Model& model) : model_(model) {}

ExpertStore::ExpertStore(const Model& model, int64_t slots) : model_(model), slots_(slots) {
  const Config& c = model.config;
  if (slots < 1 || slots > c.n_expert)
    fail("expert cache: %lld slots per layer, expected 1..%lld (the model's expert count)",
         static_cast<long long>(slots), static_cast<long long>(c.n_expert));
  const std::string& path = model.file->name();
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("%s: cannot open for expert streaming: %s", path.c_str(), std::strerror(errno));
  const std::vector<size_t> bytes = expert_bytes_per_layer(model);
  layers_.resize(bytes.size());
  for (size_t il = 0; il < bytes.size(); ++il) {
    Layer& L = layers_[il];
    L.expert_bytes = bytes[il];
    // new[] without value-initialisation: pages stay unbacked until an expert is read into them.
    L.arena.reset(new uint8_t[bytes[il] * static_cast<size_t>(slots)]);
    L.slot_of.assign(static_cast<size_t>(c.n_expert), -1);
    L.owner.assign(static_cast<size_t>(slots), -1);
    L.last_use.assign(static_cast<size_t>(slots), 0);
  }
}

ExpertStore::~ExpertStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<size_t> ExpertStore::expert_bytes_per_layer(const Model& model) {
  const Config& c = model.config;
  std::vector<size_t> out;
  for (const LayerWeights& l : model.weights.layers) {
    const MoeWeights& m = l.moe;
    out.push_back(m.expert_gate(0, c.n_ff_exp).bytes() + m.expert_up(0, c.n_ff_exp).bytes() +
                  m.expert_down(0, c.n_embd).bytes());
  }
  return out;
}

size_t ExpertStore::cache_bytes(const Model& model, int64_t slots) {
  size_t total = 0;
  for (size_t b : expert_bytes_per_layer(model)) total += b * static_cast<size_t>(slots);
  return total;
}

ExpertMatrices ExpertStore::mapped(int il, int64_t e) const {
  const Config& c = model_.config;
  const MoeWeights& m = model_.weights.layers[il].moe;
  return {m.expert_gate(e, c.n_ff_exp), m.expert_up(e, c.n_ff_exp), m.expert_down(e, c.n_embd)};
}

ExpertMatrices ExpertStore::get(int il, int64_t e) {
  if (!streamed()) return mapped(il, e);
  Layer& L = layers_[il];
  int32_t slot = L.slot_of[e];
  if (slot >= 0) {
    ++stats_.hits;
  } else {
    ++stats_.misses;
    slot = load(il, e);
  }
  L.last_use[slot] = ++clock_;
  // The slot holds gate rows, up rows, down rows back to back: the mapped views with their data moved.
  ExpertMatrices x = mapped(il, e);
  uint8_t* p = L.arena.get() + static_cast<size_t>(slot) * L.expert_bytes;
  x.gate.data = p;
  x.up.data = p + x.gate.bytes();
  x.down.data = p + x.gate.bytes() + x.up.bytes();
  return x;
}

int32_t ExpertStore::load(int il, int64_t e) {
  Layer& L = layers_[il];
  int32_t slot = 0;
  for (int32_t s = 1; s < static_cast<int32_t>(L.owner.size()); ++s)
    if (L.last_use[s] < L.last_use[slot]) slot = s;
  if (L.owner[slot] >= 0) L.slot_of[L.owner[slot]] = -1;
  L.owner[slot] = -1;  // stays empty if a read below throws

  const auto t0 = std::chrono::steady_clock::now();
  const ExpertMatrices x = mapped(il, e);
  uint8_t* p = L.arena.get() + static_cast<size_t>(slot) * L.expert_bytes;
  if (x.up.data == x.gate.data + x.gate.bytes()) {  // fused gate_up: one contiguous range
    read_exact(p, x.gate.data, x.gate.bytes() + x.up.bytes());
  } else {
    read_exact(p, x.gate.data, x.gate.bytes());
    read_exact(p + x.gate.bytes(), x.up.data, x.up.bytes());
  }
  read_exact(p + x.gate.bytes() + x.up.bytes(), x.down.data, x.down.bytes());
  stats_.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.bytes_read += L.expert_bytes;

  L.owner[slot] = static_cast<int32_t>(e);
  L.slot_of[e] = slot;
  return slot;
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

}  // namespace tern::models::qwen35moe
