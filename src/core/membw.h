// Memory read bandwidth of this machine, measured: threads stream-read disjoint slices of one buffer much larger
// than the caches (summing 64-bit words, four independent accumulators). The roofline every decode number is
// compared against (bench/membw, `tern bench --profile`). Not a STREAM clone: read-only, no copy or triad.
#pragma once
#include <cstddef>

namespace tern {

struct MemBandwidth {
  double best_gbs = 0;    // best of the runs, 1e9 bytes/s
  double median_gbs = 0;
  size_t bytes = 0;       // buffer size
  int threads = 0, runs = 0;
};

// threads <= 0: n_threads(). bytes is rounded down to a multiple of 64 * threads. Allocates and first-touches the
// buffer from the threads that read it.
MemBandwidth measure_read_bandwidth(int threads, size_t bytes = size_t(1) << 30, int runs = 7);

}  // namespace tern
