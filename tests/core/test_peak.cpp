// core/peak: every compute-peak kernel the CPU can run does exactly the work it claims (its accumulator sum equals
// the products it counts), and the probe returns positive finite rates. No timing assertions.
#include <gtest/gtest.h>

#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/peak.h"
#include "core/peak_kernels.h"

using namespace tern;

namespace {
struct Case {
  const char* name;
  peak::KernelFn fn;
  double ops_per_iter;
  bool int8;
  bool runs_here;
};

bool avx2() { return cpu_features().avx2 && cpu_features().fma; }
bool avx512() {
  const CpuFeatures& f = cpu_features();
  return avx2() && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
}
}  // namespace

// Exact: all-ones inputs, so the lanes' sum counts the products (int8: one per MAC; fp32: one per FMA = 2 FLOPs);
// 1000 iterations keep every lane far below int32 overflow and 2^24.
TEST(ComputePeak, KernelsDoTheWorkTheyCount) {
  const Case cases[] = {
      {"int8_ref", peak::int8_ref, peak::kInt8RefOps, true, true},
      {"fp32_ref", peak::fp32_ref, peak::kFp32RefOps, false, true},
      {"int8_avx2", peak::int8_avx2, peak::kInt8Avx2Ops, true, avx2()},
      {"fp32_avx2", peak::fp32_avx2, peak::kFp32Avx2Ops, false, avx2()},
      {"int8_avx512vnni", peak::int8_avx512vnni, peak::kInt8Avx512VnniOps, true,
       avx512() && cpu_features().avx512vnni},
      {"fp32_avx512", peak::fp32_avx512, peak::kFp32Avx512Ops, false, avx512()},
  };
  for (const Case& c : cases) {
    if (!c.runs_here) {
      std::printf("[ SKIPPED  ] %s: this CPU lacks the ISA\n", c.name);
      continue;
    }
    for (int64_t iters : {1, 7, 1000}) {
      const double products = c.ops_per_iter * static_cast<double>(iters) / (c.int8 ? 1 : 2);
      EXPECT_EQ(c.fn(iters), products) << c.name << " iters " << iters;
    }
  }
}

TEST(ComputePeak, ReturnsPositiveFiniteRates) {
  const ComputePeak p = measure_compute_peak(2, 1, 0.002);
  EXPECT_EQ(p.threads, 2);
  ASSERT_NE(p.best(true), nullptr);
  ASSERT_NE(p.best(false), nullptr);
  for (const PeakRate& r : p.kernels) {
    if (!r.measured) {
      EXPECT_FALSE(r.skip_reason.empty()) << r.kernel;
      continue;
    }
    EXPECT_TRUE(std::isfinite(r.one_thread) && r.one_thread > 0) << r.kernel;
    EXPECT_TRUE(std::isfinite(r.all_threads) && r.all_threads > 0) << r.kernel;
  }
  EXPECT_EQ(p.best(true)->int8, true);
  EXPECT_EQ(p.best(false)->int8, false);
}

// The N-thread rate counts N kernels: a region that gets fewer threads (here: nested in another, so it runs on
// one) must fail, not report one thread's time as N threads' work.
TEST(ComputePeak, FailsWhenThePoolRunsFewerThreads) {
  parallel_region(2, [](ThreadCtx& ctx) {
    if (ctx.thread_id() == 0) {
      EXPECT_THROW(measure_compute_peak(2, 1, 0.002), Error);
    }
  });
}

TEST(ComputePeak, RejectsBadArguments) {
  EXPECT_THROW(measure_compute_peak(1, 0), Error);
  EXPECT_THROW(measure_compute_peak(1, 1, 0.0), Error);
}
