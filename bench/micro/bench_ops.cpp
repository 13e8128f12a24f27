// Float-op micro-benchmarks per ISA at Qwen3.5-35B-A3B shapes: causal attention (prefill of T tokens, decode at a
// given depth; f16 and f32 caches). The delta rule's forms have their own tool (bench/delta). Arg: thread count.
// Run: tern_bench_micro --benchmark_filter=BM_attention
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "ops/attention.h"

using namespace tern;
using namespace tern::ops;

namespace {

// Attention: 16 query heads over 2 KV heads of 256 (Qwen3.5-35B-A3B), T new tokens after `past` cached ones, for
// each cache type (quantized: with the engine's default rotation, sink and window).
void bm_attention(benchmark::State& st, Isa isa, KvType type, int64_t T, int64_t past) {
  if (!isa_supported(isa)) {
    st.SkipWithError("this CPU lacks the ISA");
    return;
  }
  set_n_threads(static_cast<int>(st.range(0)));
  const int64_t nh = 16, nkv = 2, hd = 256, n_ctx = past + T;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> k(n_ctx * nkv * hd), v(k.size()), q(T * nh * hd), out(q.size());
  for (auto* vec : {&k, &v, &q})
    for (auto& x : *vec) x = u(rng);
  std::vector<uint8_t> kc(nkv * n_ctx * kv_row_bytes(type, hd)), vc(kc.size());
  std::vector<uint16_t> k16, v16;
  KvCacheView kv{type, type, kc.data(), vc.data(), nkv, n_ctx, hd};
  if (kv_quantized(type)) {  // as the engine keeps a quantized cache by default: rotated, sink 16 + window 128 in f16
    k16.resize(nkv * n_ctx * hd);
    v16.resize(k16.size());
    kv.k16 = k16.data();
    kv.v16 = v16.data();
    kv.sink = 16;
    kv.window = 128;
    kv.rotate = true;
  }
  kv_store(kv, k.data(), v.data(), n_ctx, 0, isa);
  for (auto _ : st) {
    attention_causal(q.data(), T, nh, kv, past, 0.0625f, out.data(), isa);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["tok_per_s"] = benchmark::Counter(static_cast<double>(T) * st.iterations(), benchmark::Counter::kIsRate);
}

const int kRegistered = [] {
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    for (KvType type : {KvType::kF16, KvType::kF32, KvType::kQ8_0, KvType::kQ4_0}) {
      const char* tn = kv_type_name(type);
      for (const auto& tp : {std::pair<int64_t, int64_t>{512, 0}, {1, 4096}, {1, 8192}}) {
        const std::string name = std::string("BM_attention/") + isa_name(isa) + "/" + tn + "/T" +
                                 std::to_string(tp.first) + "_past" + std::to_string(tp.second);
        benchmark::RegisterBenchmark(name.c_str(), bm_attention, isa, type, tp.first, tp.second)
            ->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  }
  return 0;
}();

}  // namespace
