// tern_peak: this machine's compute peak (tern::measure_compute_peak): int8 dot products (AVX2 vpmaddubsw+vpmaddwd,
// AVX-512 VNNI vpdpbusd where the CPU has it) in GMAC/s and fp32 FMA in GFLOP/s, with 1 thread and with N; the
// roofline bench/e2e.py divides prefill by, next to tern_membw's bandwidth for decode.
// usage: tern_peak [-t THREADS] [-r RUNS] [--min-ms MS] [--json]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cpu.h"
#include "core/parallel.h"
#include "core/peak.h"

namespace {
int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "tern_peak: %s\n", msg);
  std::fprintf(stderr, "usage: tern_peak [-t THREADS (0: all)] [-r RUNS (5)] [--min-ms MS per run (50)] [--json]\n");
  return msg ? 1 : 0;
}

bool parse_int(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// One JSON string (kernel names, instruction lists and skip reasons are plain ASCII without quotes).
std::string q(const std::string& s) { return "\"" + s + "\""; }

void print_json(const tern::ComputePeak& p) {
  std::printf("{\"threads\": %d, \"runs\": %d, \"cpu\": %s", p.threads, p.runs,
              q(tern::cpu_features().summary()).c_str());
  for (const bool int8 : {true, false}) {
    const tern::PeakRate* b = p.best(int8);
    const char* k = int8 ? "int8_gmacs" : "fp32_gflops";
    std::printf(", \"%s\": %.3f, \"%s_1t\": %.3f, \"%s_kernel\": %s", k, b ? b->all_threads : 0.0, k,
                b ? b->one_thread : 0.0, int8 ? "int8" : "fp32", b ? q(b->kernel).c_str() : "null");
  }
  std::printf(", \"kernels\": [");
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const tern::PeakRate& r = p.kernels[i];
    std::printf("%s{\"kernel\": %s, \"instructions\": %s, \"unit\": %s, \"measured\": %s", i ? ", " : "",
                q(r.kernel).c_str(), q(r.instructions).c_str(), r.int8 ? "\"GMAC/s\"" : "\"GFLOP/s\"",
                r.measured ? "true" : "false");
    if (r.measured)
      std::printf(", \"one_thread\": %.3f, \"all_threads\": %.3f}", r.one_thread, r.all_threads);
    else
      std::printf(", \"skip_reason\": %s}", q(r.skip_reason).c_str());
  }
  std::printf("]}\n");
}

void print_text(const tern::ComputePeak& p) {
  std::printf("compute peak (%s; best of %d runs; 1 thread / %d threads):\n", tern::cpu_features().summary().c_str(),
              p.runs, p.threads);
  for (const tern::PeakRate& r : p.kernels) {
    if (r.measured)
      std::printf("  %-16s %10.2f / %10.2f %-7s  %s\n", r.kernel.c_str(), r.one_thread, r.all_threads,
                  r.int8 ? "GMAC/s" : "GFLOP/s", r.instructions.c_str());
    else
      std::printf("  %-16s skipped: %s\n", r.kernel.c_str(), r.skip_reason.c_str());
  }
}
}  // namespace

int main(int argc, char** argv) {
  long threads = 0, runs = 5, min_ms = 50;
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
    } else if (a == "-r" || a == "--runs") {
      if (!value(1, 1000, &runs)) return usage("-r needs an integer 1..1000");
    } else if (a == "--min-ms") {
      if (!value(1, 60000, &min_ms)) return usage("--min-ms needs an integer 1..60000");
    } else {
      return usage(("unknown argument: " + a).c_str());
    }
  }
  try {
    tern::set_n_threads(static_cast<int>(threads));
    const tern::ComputePeak p =
        tern::measure_compute_peak(tern::n_threads(), static_cast<int>(runs), static_cast<double>(min_ms) * 1e-3);
    if (json)
      print_json(p);
    else
      print_text(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tern_peak: %s\n", e.what());
    return 1;
  }
  return 0;
}
