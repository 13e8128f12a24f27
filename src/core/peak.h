// Compute peak of this machine, measured: the int8 dot-product rate (u8 x s8 products summed into int32, the
// inner step of tern's and llama.cpp's quantized kernels) and the fp32 FMA rate, each with 1 thread and with N,
// from register-only chains with enough independent accumulators to hide latency. The compute roofline
// bench/e2e.py divides prefill by, as tern_membw's bandwidth is decode's. Not a full-kernel benchmark: no loads.
#pragma once
#include <string>
#include <vector>

namespace tern {

struct PeakRate {
  std::string kernel;        // "int8_avx2", "int8_avx512vnni", "fp32_avx2", ... (core/peak_kernels.h)
  std::string instructions;  // the measured instruction sequence, e.g. "vpmaddubsw+vpmaddwd+vpaddd ymm"
  bool int8 = false;         // rates in GMAC/s (one u8 x s8 product added = 1 MAC); else GFLOP/s (an FMA is 2)
  bool measured = false;     // false: skipped, skip_reason says why
  std::string skip_reason;
  double one_thread = 0;     // 1e9 per second, best of the runs
  double all_threads = 0;    // the same with ComputePeak::threads threads, all running the kernel at once
};

struct ComputePeak {
  std::vector<PeakRate> kernels;  // every kernel tern has, measured or skipped
  int threads = 0, runs = 0;
  const PeakRate* best(bool int8) const;  // the fastest measured kernel of that kind (all threads), or nullptr
};

// threads <= 0: n_threads(). Each kernel: calibrated on one thread to run >= min_seconds, one warm-up, then the best
// of `runs` runs with 1 thread and with `threads`. Kernels are chosen by cpu_features(): each SIMD kernel this CPU
// can run is measured; the portable one only when no SIMD kernel of its kind can run (the others are skipped, with
// the reason). About 4 kernels x 2 x (runs + 1) x min_seconds.
ComputePeak measure_compute_peak(int threads, int runs = 5, double min_seconds = 0.05);

}  // namespace tern
