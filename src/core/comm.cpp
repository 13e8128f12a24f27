#include "core/comm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tern {
namespace {

class LocalComm : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "local"; }
  void allgather(const void* in, void* out, const std::vector<size_t>& bytes) override {
    if (bytes.size() != 1) fail("internal: allgather with %zu counts on one rank", bytes.size());
    if (in != out && bytes[0]) std::memmove(out, in, bytes[0]);
  }
  void broadcast(void*, size_t, int root) override {
    if (root != 0) fail("internal: broadcast from rank %d of 1", root);
  }
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

std::unique_ptr<Comm>& world_ptr() {
  static std::unique_ptr<Comm> w = make_local_comm();
  return w;
}

}  // namespace

std::unique_ptr<Comm> make_local_comm() { return std::make_unique<LocalComm>(); }

Comm& world() { return *world_ptr(); }
void set_world(std::unique_ptr<Comm> comm) { world_ptr() = std::move(comm); }

void sum_over_ranks(Comm& comm, float* x, int64_t n, std::vector<float>& scratch) {
  const int R = comm.size();
  if (R == 1 || n == 0) return;
  scratch.resize(static_cast<size_t>(R * n));
  comm.allgather(x, scratch.data(), std::vector<size_t>(static_cast<size_t>(R), static_cast<size_t>(n) * sizeof(float)));
  // ((s0 + s1) + s2) + ... per element, a rank's row at a time (contiguous, so the compiler vectorizes it).
  std::copy(scratch.begin(), scratch.begin() + n, x);
  for (int r = 1; r < R; ++r) {
    const float* s = scratch.data() + static_cast<size_t>(r * n);
    for (int64_t i = 0; i < n; ++i) x[i] += s[i];
  }
}

int64_t min_over_ranks(Comm& comm, int64_t v) {
  if (comm.size() == 1) return v;
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&v, all.data(), std::vector<size_t>(all.size(), sizeof v));
  return *std::min_element(all.begin(), all.end());
}

int64_t max_over_ranks(Comm& comm, int64_t v) { return -min_over_ranks(comm, -v); }

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

int64_t ColumnLayout::local(int r) const {
  int64_t n = 0;
  for (const auto& b : blocks[static_cast<size_t>(r)]) n += b.second;
  return n;
}

ColumnLayout ColumnLayout::contiguous(int64_t total, int64_t align, int ranks) {
  const Split s{total, align, ranks};
  ColumnLayout l;
  l.total = total;
  for (int r = 0; r < ranks; ++r) l.blocks.push_back({{s.begin(r), s.size(r)}});
  return l;
}

void gather_columns(Comm& comm, const ColumnLayout& layout, const float* mine, int64_t n_rows, float* out,
                    std::vector<float>& scratch) {
  const int R = comm.size();
  if (static_cast<int>(layout.blocks.size()) != R)
    fail("internal: a column layout for %zu ranks on %d", layout.blocks.size(), R);
  std::vector<size_t> bytes(static_cast<size_t>(R));
  size_t all = 0;
  for (int r = 0; r < R; ++r) all += bytes[r] = static_cast<size_t>(n_rows * layout.local(r)) * sizeof(float);
  scratch.resize(all / sizeof(float));
  comm.allgather(mine, scratch.data(), bytes);
  const float* src = scratch.data();
  for (int r = 0; r < R; ++r) {
    const int64_t w = layout.local(r);
    for (int64_t row = 0; row < n_rows; ++row, src += w) {
      const float* s = src;
      for (const auto& [c0, n] : layout.blocks[static_cast<size_t>(r)]) {
        std::copy(s, s + n, out + row * layout.total + c0);
        s += n;
      }
    }
  }
}

int64_t Split::begin(int r) const {
  if (r >= parts) return n;
  const int64_t units = (n + align - 1) / align;  // shares are counted in aligned units
  return std::min(n, units * r / parts * align);
}

}  // namespace tern
