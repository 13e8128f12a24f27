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
#include "ops/mla.h"

using namespace tern;
using namespace tern::ops;

namespace {

// Attention: 16 query heads over 2 KV heads of 256 (Qwen3.5-35B-A3B), T new tokens after `past` cached ones, for
// each cache type (quantized: with the engine's default rotation, sink and window). `layers` caches are visited in
// turn, one per iteration (x10: the 35B's ten attention layers, whose caches at depth 8192 do not fit in L3
// together, so each is read from memory as in decoding; x1 stays in cache between iterations).
void bm_attention(benchmark::State& st, Isa isa, KvType type, int64_t T, int64_t past, int64_t layers) {
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
  std::vector<std::vector<uint8_t>> kc(layers), vc(layers);
  std::vector<std::vector<uint16_t>> k16(layers), v16(layers);
  std::vector<KvCacheView> kv(layers);
  for (int64_t l = 0; l < layers; ++l) {
    kc[l].resize(nkv * n_ctx * kv_row_bytes(type, hd));
    vc[l].resize(kc[l].size());
    kv[l] = KvCacheView{type, type, kc[l].data(), vc[l].data(), nkv, n_ctx, hd};
    if (kv_quantized(type)) {  // as the engine keeps a quantized cache by default: rotated, sink 16 + window 128 in f16
      k16[l].resize(nkv * n_ctx * hd);
      v16[l].resize(k16[l].size());
      kv[l].k16 = k16[l].data();
      kv[l].v16 = v16[l].data();
      kv[l].sink = 16;
      kv[l].window = 128;
      kv[l].rotate = true;
    }
    kv_store(kv[l], k.data(), v.data(), n_ctx, 0, isa);
  }
  int64_t l = 0;
  for (auto _ : st) {
    attention_causal(q.data(), T, nh, kv[l], past, 0.0625f, out.data(), isa);
    benchmark::DoNotOptimize(out.data());
    l = (l + 1) % layers;
  }
  st.counters["tok_per_s"] = benchmark::Counter(static_cast<double>(T) * st.iterations(), benchmark::Counter::kIsRate);
}

// MLA at GLM-5's widths (64 heads, kv_lora 512, rope 64, nope 192, v 256), T new tokens after `past` cached ones,
// dense (every causal key): "absorbed" is attention_mla over the one-head latent cache (576-wide keys, the first 512
// dims as values); "expanded" is the attention step of the plain form, attention_mla_expanded over 64 per-head f32
// keys and values of 256 (nope + rope keys, v_head values; the expansion's matmuls are not in it).
void bm_mla(benchmark::State& st, Isa isa, bool expanded, int64_t T, int64_t past) {
  if (!isa_supported(isa)) {
    st.SkipWithError("this CPU lacks the ISA");
    return;
  }
  set_n_threads(static_cast<int>(st.range(0)));
  const int64_t H = 64, dc = 576, L = 512, hd = 256, n_ctx = past + T;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(T * H * (expanded ? hd : dc)), out(T * H * (expanded ? hd : L));
  for (auto& x : q) x = u(rng);
  std::vector<float> k, v;
  std::vector<uint16_t> lat;
  if (expanded) {
    k.resize(H * n_ctx * hd);
    v.resize(k.size());
    for (auto* vec : {&k, &v})
      for (auto& x : *vec) x = u(rng);
  } else {
    std::vector<float> rows(n_ctx * dc);
    for (auto& x : rows) x = u(rng);
    lat.resize(rows.size());
    rows_store(lat.data(), KvType::kF16, n_ctx, dc, rows.data(), n_ctx, 0, isa);
  }
  const float scale = 1.0f / 16.0f;
  for (auto _ : st) {
    if (expanded) {
      attention_mla_expanded(q.data(), H * hd, T, H, k.data(), v.data(), n_ctx, hd, hd, past, scale, out.data(), H * hd,
                             isa);
    } else {
      attention_mla(q.data(), T, H, lat.data(), KvType::kF16, n_ctx, dc, L, past, nullptr, 0, nullptr, scale,
                    out.data(), isa);
    }
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["tok_per_s"] = benchmark::Counter(static_cast<double>(T) * st.iterations(), benchmark::Counter::kIsRate);
}

const int kRegistered = [] {
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    for (KvType type : {KvType::kF16, KvType::kF32, KvType::kQ8_0, KvType::kQ4_0}) {
      const char* tn = kv_type_name(type);
      struct Case {
        int64_t T, past, layers;
      };
      for (const Case& c : {Case{512, 0, 1}, Case{1, 1024, 1}, Case{1, 4096, 1}, Case{1, 8192, 1}, Case{1, 8192, 10}}) {
        const std::string name = std::string("BM_attention/") + isa_name(isa) + "/" + tn + "/T" +
                                 std::to_string(c.T) + "_past" + std::to_string(c.past) +
                                 (c.layers > 1 ? "_x" + std::to_string(c.layers) : "");
        benchmark::RegisterBenchmark(name.c_str(), bm_attention, isa, type, c.T, c.past, c.layers)
            ->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    for (bool expanded : {false, true})
      for (int64_t T : {64, 512})
        for (int64_t past : {0, 1536}) {
          const std::string name = std::string("BM_mla/") + isa_name(isa) + (expanded ? "/expanded" : "/absorbed") +
                                   "/T" + std::to_string(T) + "_past" + std::to_string(past);
          benchmark::RegisterBenchmark(name.c_str(), bm_mla, isa, expanded, T, past)
              ->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
        }
  return 0;
}();

}  // namespace
