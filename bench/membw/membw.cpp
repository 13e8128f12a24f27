// tern_membw: this machine's memory read bandwidth (best and median of several streaming reads of a buffer much
// larger than the caches; tern::measure_read_bandwidth), the roofline bench/e2e.py divides decode speed by.
// usage: tern_membw [-t THREADS] [--mib MIB] [-r RUNS] [--json]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/membw.h"
#include "core/parallel.h"

namespace {
int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "tern_membw: %s\n", msg);
  std::fprintf(stderr, "usage: tern_membw [-t THREADS (0: all)] [--mib MIB (1024)] [-r RUNS (7)] [--json]\n");
  return msg ? 1 : 0;
}

bool parse_int(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  long threads = 0, mib = 1024, runs = 7;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](long lo, long hi, long* out) {
      if (i + 1 >= argc) return false;
      return parse_int(argv[++i], lo, hi, out);
    };
    if (a == "-h" || a == "--help") return usage(nullptr);
    if (a == "--json") {
      json = true;
    } else if (a == "-t" || a == "--threads") {
      if (!value(0, 1024, &threads)) return usage("-t needs an integer 0..1024");
    } else if (a == "--mib") {
      if (!value(64, 1 << 20, &mib)) return usage("--mib needs an integer >= 64");
    } else if (a == "-r" || a == "--runs") {
      if (!value(1, 1000, &runs)) return usage("-r needs an integer 1..1000");
    } else {
      return usage(("unknown argument: " + a).c_str());
    }
  }
  try {
    tern::set_n_threads(static_cast<int>(threads));
    const tern::MemBandwidth m = tern::measure_read_bandwidth(tern::n_threads(), static_cast<size_t>(mib) << 20,
                                                              static_cast<int>(runs));
    if (json)
      std::printf("{\"read_gbs_best\": %.3f, \"read_gbs_median\": %.3f, \"bytes\": %zu, \"threads\": %d, "
                  "\"runs\": %d}\n", m.best_gbs, m.median_gbs, m.bytes, m.threads, m.runs);
    else
      std::printf("memory read bandwidth: %.2f GB/s best, %.2f GB/s median (%d threads, %zu MiB, %d runs)\n",
                  m.best_gbs, m.median_gbs, m.threads, m.bytes >> 20, m.runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tern_membw: %s\n", e.what());
    return 1;
  }
  return 0;
}
