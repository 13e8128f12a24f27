#include "core/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/peak_kernels.h"

namespace tern {

namespace peak {

// The portable kernels: what the compiler makes of plain C++ for baseline x86-64 (SSE2). The asm takes the inputs'
// and accumulators' addresses and clobbers memory, so every iteration reloads, multiplies and stores again.
double int8_ref(int64_t iters) {
  uint8_t a[64];
  int8_t b[64];
  int32_t acc[16] = {};
  std::fill(a, a + 64, uint8_t{1});
  std::fill(b, b + 64, int8_t{1});
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : : "r"(a), "r"(b), "r"(acc) : "memory");
    for (int k = 0; k < 64; ++k) acc[k % 16] += int32_t{a[k]} * int32_t{b[k]};
  }
  double s = 0;
  for (int32_t x : acc) s += x;
  return s;
}

double fp32_ref(int64_t iters) {
  float a[32], b[32], acc[32] = {};
  std::fill(a, a + 32, 1.0f);
  std::fill(b, b + 32, 1.0f);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : : "r"(a), "r"(b), "r"(acc) : "memory");
    for (int k = 0; k < 32; ++k) acc[k] += a[k] * b[k];
  }
  double s = 0;
  for (float x : acc) s += x;
  return s;
}

}  // namespace peak

namespace {

struct KernelDef {
  const char* name;
  const char* instructions;
  bool int8;
  bool simd;
  double ops_per_iter;  // int8: MACs; fp32: FLOPs
  peak::KernelFn fn;
  const char* needs;    // the cpu_features() it needs, for the skip reason
  bool (*supported)();
};

bool has_avx2() { return cpu_features().avx2 && cpu_features().fma; }
bool has_avx512() {
  const CpuFeatures& f = cpu_features();
  return has_avx2() && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
}
bool has_avx512vnni() { return has_avx512() && cpu_features().avx512vnni; }
bool always() { return true; }

const KernelDef kKernels[] = {
    {"int8_avx512vnni", "vpdpbusd zmm", true, true, peak::kInt8Avx512VnniOps, peak::int8_avx512vnni,
     "avx512f/bw/vl/dq + avx512vnni", has_avx512vnni},
    {"int8_avx2", "vpmaddubsw+vpmaddwd+vpaddd ymm", true, true, peak::kInt8Avx2Ops, peak::int8_avx2, "avx2 + fma",
     has_avx2},
    {"int8_ref", "portable C++ (baseline x86-64)", true, false, peak::kInt8RefOps, peak::int8_ref, "", always},
    {"fp32_avx512", "vfmadd231ps zmm", false, true, peak::kFp32Avx512Ops, peak::fp32_avx512, "avx512f/bw/vl/dq",
     has_avx512},
    {"fp32_avx2", "vfmadd231ps ymm", false, true, peak::kFp32Avx2Ops, peak::fp32_avx2, "avx2 + fma", has_avx2},
    {"fp32_ref", "portable C++ (baseline x86-64)", false, false, peak::kFp32RefOps, peak::fp32_ref, "", always},
};

// Wall seconds for `threads` threads of tern's pool each running fn(iters) at once (the region's start and end
// included). A region that got fewer threads (the pool busy, or a nested call) would time fewer kernels than the
// rate counts: an error, not a silently wrong peak.
double run_seconds(peak::KernelFn fn, int64_t iters, int threads) {
  std::vector<double> sink(static_cast<size_t>(threads), 0.0);
  int ran = 0;
  const auto t0 = std::chrono::steady_clock::now();
  parallel_region(threads, [&](ThreadCtx& ctx) {
    if (ctx.thread_id() == 0) ran = ctx.n_threads();
    sink[static_cast<size_t>(ctx.thread_id())] = fn(iters);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ran != threads) fail("compute peak: asked for %d threads, the thread pool ran %d", threads, ran);
  volatile double keep = 0;
  for (double v : sink) keep = keep + v;
  return s;
}

// Best rate (1e9 ops/s) of `runs` runs after one warm-up.
double best_rate(const KernelDef& k, int64_t iters, int threads, int runs) {
  run_seconds(k.fn, iters, threads);
  double best = 0;
  for (int r = 0; r < runs; ++r) {
    const double s = run_seconds(k.fn, iters, threads);
    best = std::max(best, k.ops_per_iter * static_cast<double>(iters) * threads / s * 1e-9);
  }
  return best;
}

// Iterations for one thread to run about min_seconds (at least 1024).
int64_t calibrate(const KernelDef& k, double min_seconds) {
  int64_t iters = 1024;
  for (;;) {
    const double s = run_seconds(k.fn, iters, 1);
    if (s >= min_seconds || iters >= (int64_t{1} << 40)) return iters;
    const double grow = s > 0 ? std::clamp(1.2 * min_seconds / s, 1.5, 64.0) : 64.0;
    iters = static_cast<int64_t>(static_cast<double>(iters) * grow);
  }
}

}  // namespace

const PeakRate* ComputePeak::best(bool int8) const {
  const PeakRate* b = nullptr;
  for (const PeakRate& r : kernels)
    if (r.measured && r.int8 == int8 && (!b || r.all_threads > b->all_threads)) b = &r;
  return b;
}

ComputePeak measure_compute_peak(int threads, int runs, double min_seconds) {
  if (threads <= 0) threads = n_threads();
  if (runs < 1) fail("compute peak: runs must be >= 1 (got %d)", runs);
  if (!(min_seconds > 0 && min_seconds <= 60)) fail("compute peak: min_seconds must be in (0, 60]");
  ComputePeak p;
  p.threads = threads;
  p.runs = runs;
  for (const KernelDef& k : kKernels) {
    PeakRate r;
    r.kernel = k.name;
    r.instructions = k.instructions;
    r.int8 = k.int8;
    const bool simd_of_kind = std::any_of(std::begin(kKernels), std::end(kKernels), [&](const KernelDef& o) {
      return o.simd && o.int8 == k.int8 && o.supported();
    });
    if (!k.supported()) {
      r.skip_reason = strf("this CPU lacks %s", k.needs);
    } else if (!k.simd && simd_of_kind) {
      r.skip_reason = "a SIMD kernel of this kind runs here";
    } else {
      const int64_t iters = calibrate(k, min_seconds);
      r.one_thread = best_rate(k, iters, 1, runs);
      r.all_threads = threads == 1 ? r.one_thread : best_rate(k, iters, threads, runs);
      r.measured = true;
    }
    p.kernels.push_back(r);
  }
  return p;
}

}  // namespace tern
