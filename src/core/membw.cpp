#include "core/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/mmap.h"
#include "core/parallel.h"

namespace tern {

namespace {
// Sum of words [0, n): four chains so the adds never limit the loads; the result is kept so nothing is elided.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a ^ b ^ c ^ d;
}
}  // namespace

MemBandwidth measure_read_bandwidth(int threads, size_t bytes, int runs) {
  if (threads <= 0) threads = n_threads();
  if (runs < 1) fail("memory bandwidth: runs must be >= 1 (got %d)", runs);
  const size_t per_thread = bytes / (64 * static_cast<size_t>(threads)) * 64;  // bytes, a multiple of 64
  if (per_thread == 0) fail("memory bandwidth: buffer of %zu bytes is too small for %d threads", bytes, threads);
  const size_t words = per_thread / sizeof(uint64_t);
  // The memory tern's repacked weights live in (AnonBuffer: transparent huge pages requested), so the probe pays
  // the TLB misses a decode pays and no more: a plain allocation gets 4 KiB pages where this machine's THP
  // setting is "madvise", and read 10-30% below what the weights stream at (measured on the Zen 3 VM).
  AnonBuffer buf(per_thread * threads);
  uint64_t* base = reinterpret_cast<uint64_t*>(buf.data());
  // Slice k belongs to thread k; a region that gets fewer threads than asked (nested, or the pool busy) takes several.
  parallel_region(threads, [&](ThreadCtx& ctx) {
    for (int k = ctx.thread_id(); k < threads; k += ctx.n_threads()) {
      uint64_t* p = base + static_cast<size_t>(k) * words;
      for (size_t i = 0; i < words; ++i) p[i] = i;  // first touch: pages land near the thread that reads them
    }
  });
  std::vector<double> gbs;
  volatile uint64_t sink = 0;
  for (int r = 0; r < runs; ++r) {
    std::vector<uint64_t> part(threads, 0);
    const auto t0 = std::chrono::steady_clock::now();
    parallel_region(threads, [&](ThreadCtx& ctx) {
      for (int k = ctx.thread_id(); k < threads; k += ctx.n_threads())
        part[k] = sum_words(base + static_cast<size_t>(k) * words, words);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t acc = 0;
    for (uint64_t v : part) acc ^= v;
    sink = sink ^ acc;
    gbs.push_back(static_cast<double>(per_thread * threads) / s * 1e-9);
  }
  (void)sink;
  MemBandwidth m;
  m.best_gbs = *std::max_element(gbs.begin(), gbs.end());
  std::sort(gbs.begin(), gbs.end());
  m.median_gbs = gbs[gbs.size() / 2];
  m.bytes = per_thread * threads;
  m.threads = threads;
  m.runs = runs;
  return m;
}

}  // namespace tern
