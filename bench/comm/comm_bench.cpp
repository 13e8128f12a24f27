// tern_comm_bench: the cost of the collectives a split forward makes (core/comm.h), under mpiexec: per message size,
// the median time of an allgather of that many bytes per rank and of sum_over_ranks of that many floats, over
// many repetitions after a warm-up. The sizes are a decode token's messages: one residual row (n_embd floats,
// 2048 for Qwen3.5-35B-A3B, 8192 for the 2.4T shape), a block's heads, a gathered LM head slice.
// usage: mpiexec -np N tern_comm_bench [-r REPS] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/comm.h"
#include "dist/mpi.h"

int main(int argc, char** argv) {
  using namespace tern;
  if (dist::launched_by_mpi()) dist::init_world(&argc, &argv);
  int reps = 400;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-r") && i + 1 < argc) reps = std::max(10, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else {
      std::fprintf(stderr, "usage: mpiexec -np N tern_comm_bench [-r REPS] [--json]\n");
      return 1;
    }
  }
  Comm& c = world();
  const int R = c.size();
  const std::vector<int64_t> floats = {256, 2048, 4096, 8192, 32768, 262144};
  if (c.rank() == 0 && !json) {
    std::printf("ranks %d (%s), %d repetitions, median microseconds per call\n", R, c.name().c_str(), reps);
    std::printf("| floats per rank | bytes per rank | allgather (us) | sum_over_ranks (us) |\n|---:|---:|---:|---:|\n");
  }
  if (c.rank() == 0 && json) std::printf("{\"ranks\": %d, \"rows\": [", R);
  using Clock = std::chrono::steady_clock;
  for (size_t k = 0; k < floats.size(); ++k) {
    const int64_t n = floats[k];
    std::vector<float> x(static_cast<size_t>(n), 1.0f), all(static_cast<size_t>(n * R)), scratch;
    const std::vector<size_t> bytes(static_cast<size_t>(R), static_cast<size_t>(n) * sizeof(float));
    double med[2];
    for (int which = 0; which < 2; ++which) {
      std::vector<double> t;
      for (int i = 0; i < reps + 20; ++i) {
        const auto t0 = Clock::now();
        if (which == 0) c.allgather(x.data(), all.data(), bytes);
        else sum_over_ranks(c, x.data(), n, scratch);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (i >= 20) t.push_back(us);
        if (which == 1) std::fill(x.begin(), x.end(), 1.0f);
      }
      std::sort(t.begin(), t.end());
      double m = t[t.size() / 2];
      // Every rank's median, the slowest reported (a collective ends when its last rank does).
      std::vector<double> ms(static_cast<size_t>(R));
      c.allgather(&m, ms.data(), std::vector<size_t>(static_cast<size_t>(R), sizeof m));
      med[which] = *std::max_element(ms.begin(), ms.end());
    }
    if (c.rank() != 0) continue;
    if (json)
      std::printf("%s{\"floats\": %lld, \"allgather_us\": %.2f, \"sum_us\": %.2f}", k ? ", " : "",
                  static_cast<long long>(n), med[0], med[1]);
    else
      std::printf("| %lld | %lld | %.1f | %.1f |\n", static_cast<long long>(n), static_cast<long long>(n * 4), med[0],
                  med[1]);
  }
  if (c.rank() == 0 && json) std::printf("]}\n");
  return 0;
}
