// Matvec micro-benchmarks (decode path: n_tok = 1, through quant::matmul) per weight type x ISA, reporting
// weight bytes streamed per second ("wbytes" counter), next to the machine's streaming read bandwidth
// (BM_mem_read: AVX2 sum over 1 GiB). Weights rotate through a >= 256 MiB pool so they come from DRAM, not
// cache, as in a real forward pass. Arg: thread count. Run: tern_bench_micro --benchmark_filter=...
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "quant/kernels.h"
#include "quant/repack.h"

using namespace tern;
using namespace tern::quant;

namespace {

constexpr size_t kPoolBytes = size_t{256} << 20;

// Weight pool: every byte in [0x10, 0x3B] so every fp16 / bf16 field is a normal number in [2^-11, ~1]
// (no denormal slow paths) while integer fields still vary.
const std::vector<uint8_t>& pool() {
  static const std::vector<uint8_t> p = [] {
    std::vector<uint8_t> v(kPoolBytes);
    std::mt19937 rng(1);
    for (auto& b : v) b = static_cast<uint8_t>(0x10 + rng() % 0x2C);
    return v;
  }();
  return p;
}

void bm_matvec(benchmark::State& st, Type t, Isa isa, int64_t n_out, int64_t n_in) {
  if (!isa_supported(isa)) {
    st.SkipWithError("this CPU lacks the ISA");
    return;
  }
  set_n_threads(static_cast<int>(st.range(0)));
  const size_t rs = row_size(traits(t), n_in), mat = rs * n_out;
  const size_t n_mats = kPoolBytes / mat;
  std::vector<float> x(n_in), y(n_out);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  const uint8_t* base = pool().data();
  size_t k = 0;
  for (auto _ : st) {
    matmul(t, base + (k++ % n_mats) * mat, rs, n_out, n_in, x.data(), 1, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["wbytes"] = benchmark::Counter(static_cast<double>(mat) * st.iterations(),
                                             benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The same through the repacked (x8) layout: the pool's matrices repacked once, then rotated the same way.
// Arg 2: tokens per call (1 = decode).
void bm_matvec_x8(benchmark::State& st, Type t, Isa isa, int64_t n_out, int64_t n_in) {
  if (!isa_supported(isa)) {
    st.SkipWithError("this CPU lacks the ISA");
    return;
  }
  set_n_threads(static_cast<int>(st.range(0)));
  const int64_t n_tok = st.range(1);
  const size_t rs = row_size(traits(t), n_in), mat = rs * n_out, pmat = repacked_bytes(t, n_out, n_in);
  const size_t n_mats = kPoolBytes / mat;
  std::vector<uint8_t> packed(pmat * n_mats);
  for (size_t m = 0; m < n_mats; ++m) repack(t, pool().data() + m * mat, rs, n_out, n_in, packed.data() + m * pmat);
  std::vector<float> x(n_in * n_tok), y(n_out * n_tok);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  size_t k = 0;
  for (auto _ : st) {
    matmul_repacked(t, packed.data() + (k++ % n_mats) * pmat, n_out, n_in, x.data(), n_tok, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["wbytes"] = benchmark::Counter(static_cast<double>(pmat) * st.iterations(),
                                             benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  st.counters["tok_rows"] = benchmark::Counter(static_cast<double>(n_out * n_tok) * st.iterations(),
                                               benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The kernels' compute speed alone: one repacked 256 x n_in matrix (L2-resident) times n_tok activation rows on
// one thread, no rotation through DRAM (that is BM_matvec_x8's job). Reports GMAC/s against tern_peak's
// int8 figure. Arg: tokens per call.
void bm_gemm_x8_hot(benchmark::State& st, Type t, Isa isa, int64_t n_in) {
  if (!isa_supported(isa)) {
    st.SkipWithError("this CPU lacks the ISA");
    return;
  }
  set_n_threads(1);
  constexpr int64_t kRows = 256;
  const int64_t n_tok = st.range(0);
  const size_t rs = row_size(traits(t), n_in);
  std::vector<uint8_t> packed(repacked_bytes(t, kRows, n_in));
  repack(t, pool().data(), rs, kRows, n_in, packed.data());
  std::vector<float> x(n_in * n_tok), y(kRows * n_tok);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  const size_t xs = repacked_act_row_bytes(t, n_in);
  std::vector<uint8_t> xq(xs * n_tok);
  for (int64_t k = 0; k < n_tok; ++k) quantize_act_repacked(t, x.data() + k * n_in, xq.data() + k * xs, n_in, isa);
  for (auto _ : st) {
    gemm_repacked(t, packed.data(), kRows, n_in, xq.data(), xs, 0, kRows / kRepackRows, n_tok, y.data(), kRows, isa);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GMACs"] = benchmark::Counter(static_cast<double>(kRows * n_in * n_tok) * st.iterations() / 1e9,
                                            benchmark::Counter::kIsRate);
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float o[8];
  _mm256_store_ps(o, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}

// Streaming read bandwidth: each thread sums its contiguous share of a 1 GiB buffer.
void BM_mem_read(benchmark::State& st) {
  if (!isa_supported(Isa::kAvx2)) {
    st.SkipWithError("needs avx2");
    return;
  }
  const int threads = static_cast<int>(st.range(0));
  set_n_threads(threads);
  const size_t n = (size_t{1} << 30) / sizeof(float);
  static float* buf = [n] {
    auto* p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    for (size_t i = 0; i < n; ++i) p[i] = 1.0f;
    return p;
  }();
  std::vector<float> part(threads);
  for (auto _ : st) {
    parallel_for(threads, [&](int64_t k) { part[k] = sum_avx2(buf + k * (n / threads), n / threads); });
    benchmark::DoNotOptimize(part.data());
  }
  st.counters["rbytes"] = benchmark::Counter(static_cast<double>(n * sizeof(float)) * st.iterations(),
                                             benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_mem_read)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

const int kRegistered = [] {
  const Type types[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1,   Type::Q5_0,
                        Type::Q5_1, Type::Q8_0, Type::Q2_K, Type::Q3_K, Type::Q4_K,   Type::Q5_K,
                        Type::Q6_K, Type::IQ4_NL, Type::IQ4_XS};
  const int64_t shapes[][2] = {{2048, 2048}, {512, 2048}, {64, 2048}};
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
    for (Type t : types)
      for (const auto& s : shapes) {
        const std::string name = std::string("BM_matvec/") + type_name(t) + "/" + isa_name(isa) + "/" +
                                 std::to_string(s[0]) + "x" + std::to_string(s[1]);
        benchmark::RegisterBenchmark(name.c_str(), bm_matvec, t, isa, s[0], s[1])
            ->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    for (Type t : types) {
      if (!has_repacked(t)) continue;
      const std::string name = std::string("BM_gemm_x8_hot/") + type_name(t) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), bm_gemm_x8_hot, t, isa, 2048)
          ->Arg(1)->Arg(4)->Arg(64)->Unit(benchmark::kMicrosecond);
    }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    for (Type t : types) {
      if (!has_repacked(t)) continue;  // the float types
      for (const auto& s : shapes) {
        const std::string name = std::string("BM_matvec_x8/") + type_name(t) + "/" + isa_name(isa) + "/" +
                                 std::to_string(s[0]) + "x" + std::to_string(s[1]);
        benchmark::RegisterBenchmark(name.c_str(), bm_matvec_x8, t, isa, s[0], s[1])
            ->Args({1, 1})->Args({2, 1})->Args({1, 2})->Args({1, 3})->Args({1, 4})->Args({2, 2})->Args({2, 3})->Args({2, 4})->Args({2, 16})->Args({1, 64})->Args({2, 64})
            ->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  return 0;
}();

}  // namespace
