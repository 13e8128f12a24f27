#include "core/cpu.h"

#include <cpuid.h>

#include <atomic>
#include <mutex>

#include "core/error.h"
#include "core/log.h"

namespace tern {

static CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return f;
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  const bool osxsave = c & (1u << 27);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_ok && (b & (1u << 5));
  f.bmi2 = b & (1u << 8);
  f.avx512f = zmm_ok && (b & (1u << 16));
  f.avx512dq = zmm_ok && (b & (1u << 17));
  f.avx512bw = zmm_ok && (b & (1u << 30));
  f.avx512vl = zmm_ok && (b & (1u << 31));
  f.avx512vnni = zmm_ok && (c & (1u << 11));
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512bf16 = zmm_ok && (a1 & (1u << 5));
  if (!ymm_ok) f.fma = f.f16c = false;
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string CpuFeatures::summary() const {
  std::string s;
  auto add = [&](bool on, const char* n) {
    if (on) s += (s.empty() ? "" : " "), s += n;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  return s.empty() ? "baseline x86-64" : s;
}

static bool cpu_has(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::kRef: return true;
    case Isa::kAvx2: return f.avx2 && f.fma && f.f16c && f.bmi2;
    case Isa::kAvx512:
      return cpu_has(Isa::kAvx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni &&
             f.avx512bf16;
  }
  return false;
}

static std::atomic<bool> g_native_avx512_hidden{false};  // hide_native_avx512 (tests only)

bool isa_supported(Isa isa) {
  if (isa == Isa::kAvx512 && g_native_avx512_hidden.load(std::memory_order_acquire)) return false;
  return cpu_has(isa);
}

Isa best_isa() {
  if (cpu_has(Isa::kAvx512)) return Isa::kAvx512;
  if (cpu_has(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kRef;
}

void hide_native_avx512(bool hide) { g_native_avx512_hidden.store(hide, std::memory_order_release); }

namespace {
std::mutex g_engine_isa_mutex;
bool g_engine_isa_requested = false;  // set_engine_isa was called: g_engine_isa holds its choice
Isa g_engine_isa = Isa::kRef;
std::atomic<int> g_engine_isa_fixed{-1};  // the ISA once engine_isa() has run (then it never changes), else -1
}  // namespace

Isa engine_isa() {
  const int fixed = g_engine_isa_fixed.load(std::memory_order_acquire);
  if (fixed >= 0) return static_cast<Isa>(fixed);
  std::lock_guard<std::mutex> lock(g_engine_isa_mutex);
  if (g_engine_isa_fixed.load(std::memory_order_relaxed) < 0) {
    const Isa best = best_isa();
    if (!g_engine_isa_requested) {
      g_engine_isa = best;
      log::info("cpu: kernels use %s (cpu: %s)", isa_name(best), cpu_features().summary().c_str());
    } else {
      log::info("cpu: kernels use %s as --isa asks (best on this cpu: %s; cpu: %s)", isa_name(g_engine_isa),
                isa_name(best), cpu_features().summary().c_str());
    }
    g_engine_isa_fixed.store(static_cast<int>(g_engine_isa), std::memory_order_release);
  }
  return g_engine_isa;
}

void set_engine_isa(Isa isa) {
  if (!isa_supported(isa))
    fail("--isa %s: this CPU cannot run it (has: %s)", isa_name(isa), cpu_features().summary().c_str());
  std::lock_guard<std::mutex> lock(g_engine_isa_mutex);
  if (g_engine_isa_fixed.load(std::memory_order_relaxed) >= 0 && g_engine_isa != isa)
    fail("--isa %s: the kernels already run %s in this process", isa_name(isa), isa_name(g_engine_isa));
  g_engine_isa = isa;
  g_engine_isa_requested = true;
}

bool parse_isa(const std::string& name, Isa* isa) {
  for (Isa i : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(i)) {
      *isa = i;
      return true;
    }
  }
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef: return "ref";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace tern
