// Scoped op timers for `tern bench --profile`: where a decode token's time goes, by op. Off by default; when off a
// scope costs one predictable branch on a global flag (its bytes expression is not evaluated). Wall time on the
// calling thread: each scope wraps a whole block whose parallel work runs inside it. Scopes are flat (a scope
// inside another is counted in both); sites are registered on first use while profiling is on.
//
//   TERN_PROFILE(p, "moe.router", w.router.bytes());  // starts; ends at the end of the block or at p.done()
//   TERN_PROFILE_BYTES(p, n);                         // adds bytes read, evaluated only when profiling
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tern::profile {

extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on);

// One scope site (one per TERN_PROFILE line): totals since the last reset().
struct Site {
  explicit Site(const char* n) : name(n) {}
  const char* name;
  std::atomic<int64_t> ns{0}, calls{0}, bytes{0};
  std::atomic<bool> registered{false};
};

struct Entry {
  std::string name;
  double seconds = 0;
  int64_t calls = 0, bytes = 0;
};
void reset();                    // zero every site's totals
std::vector<Entry> snapshot();   // sites with calls > 0, totals merged by name, in first-registered order

class Scope {
 public:
  Scope(Site& site, int64_t bytes) : site_(enabled() ? &site : nullptr) {
    if (site_) {
      bytes_ = bytes;
      t0_ = std::chrono::steady_clock::now();
    }
  }
  ~Scope() { done(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  bool on() const { return site_ != nullptr; }
  void add_bytes(int64_t n) { bytes_ += n; }
  void done() {
    if (site_) finish();
    site_ = nullptr;
  }

 private:
  void finish();
  Site* site_;
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace tern::profile

#define TERN_PROFILE(var, name, bytes_expr)                                   \
  static ::tern::profile::Site var##_site(name);                              \
  ::tern::profile::Scope var(var##_site, ::tern::profile::enabled() ? static_cast<int64_t>(bytes_expr) : 0)
#define TERN_PROFILE_BYTES(var, bytes_expr) \
  do {                                      \
    if (var.on()) var.add_bytes(static_cast<int64_t>(bytes_expr)); \
  } while (0)
