// tern_bench_delta: the gated delta rule's two forms (token recurrence, chunked) per ISA and thread count at
// Qwen3.5-35B-A3B's DeltaNet shape (Hv 32, Hk 16, dk = dv = 128), in microseconds per token: min / median of 5
// rounds that interleave the forms (so a noisy neighbour hits both alike). Decays g = -exp(U(-5, 1)) (strong and
// weak heads mixed), beta ~ U(0, 1). States rotate through 512 MiB so each call reads its state from DRAM, as in a
// forward pass; for T = 1 (decode) the state bytes read + written per second are printed too. The numbers behind
// ops::delta_rule_chunk_min (ops/delta_rule.h). Usage: tern_bench_delta [threads...] (default 1 2).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "ops/delta_rule.h"

using namespace tern;
using namespace tern::ops;

namespace {

constexpr int64_t kHk = 16, kHv = 32, kD = 128, kRow = 2 * kHk * kD + kHv * kD;  // [q | k | v] per token
constexpr size_t kState = size_t{kHv} * kD * kD;                                  // floats per layer state

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), b01(0.0f, 1.0f), lg(-5.0f, 1.0f);
  const int64_t t_max = 512;
  std::vector<float> qkv(t_max * kRow), g(t_max * kHv), beta(t_max * kHv), out(t_max * kHv * kD);
  for (auto& x : qkv) x = u(rng) * 0.088f;  // ~unit-norm heads of 128
  for (auto& x : g) x = -std::exp(lg(rng));
  for (auto& x : beta) x = b01(rng);
  const size_t pool = (size_t{512} << 20) / (kState * 4);
  std::vector<float> states(pool * kState, 0.01f);
  const DeltaRuleInputs in{qkv.data(), kRow, qkv.data() + kHk * kD, kRow, qkv.data() + 2 * kHk * kD, kRow,
                           g.data(), beta.data()};
  std::printf("cpu: %s; us per token, min / median of 5 interleaved rounds\n", cpu_features().summary().c_str());
  size_t next = 0;
  for (int nt : threads) {
    set_n_threads(nt);
    for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) {
        std::printf("t=%d %-6s skipped: this CPU lacks it\n", nt, isa_name(isa));
        continue;
      }
      for (int64_t T : {1, 64, 512}) {
        if (isa == Isa::kRef && T > 64) continue;
        const DeltaRuleShape shape{T, kHk, kHv, kD, kD};
        std::vector<double> r[2];
        const int reps = T == 1 ? 60 : std::max<int>(2, static_cast<int>(1024 / T / nt));
        for (int round = 0; round < 5; ++round) {
          for (int form = 0; form < (T == 1 ? 1 : 2); ++form) {
            double best = 1e9;
            for (int i = 0; i < reps; ++i) {
              float* s = states.data() + (next++ % pool) * kState;
              const double t0 = now();
              if (form == 0) {
                gated_delta_rule_recurrent(shape, in, s, out.data(), isa);
              } else {
                gated_delta_rule_chunked(shape, in, s, out.data(), isa);
              }
              best = std::min(best, now() - t0);
            }
            r[form].push_back(best / static_cast<double>(T) * 1e6);
          }
        }
        for (auto& v : r) std::sort(v.begin(), v.end());
        std::printf("t=%d %-6s T=%3lld  recurrent %8.2f / %8.2f", nt, isa_name(isa), static_cast<long long>(T),
                    r[0][0], r[0][2]);
        if (T > 1) {
          std::printf("   chunked %8.2f / %8.2f   recurrent/chunked %.2f\n", r[1][0], r[1][2], r[0][2] / r[1][2]);
        } else {
          std::printf("   state read + written: %.1f GB/s\n", 2.0 * kState * 4 / (r[0][0] * 1e-6) / 1e9);
        }
        std::fflush(stdout);
      }
    }
  }
}
