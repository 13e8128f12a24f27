#include "core/profile.h"

#include <mutex>

namespace tern::profile {

std::atomic<bool> g_enabled{false};

namespace {
std::mutex g_mu;
std::vector<Site*>& sites() {
  static std::vector<Site*> s;
  return s;
}
}  // namespace

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void Scope::finish() {
  const auto dt = std::chrono::steady_clock::now() - t0_;
  site_->ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count(), std::memory_order_relaxed);
  site_->calls.fetch_add(1, std::memory_order_relaxed);
  site_->bytes.fetch_add(bytes_, std::memory_order_relaxed);
  if (!site_->registered.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!site_->registered.load(std::memory_order_relaxed)) {
      sites().push_back(site_);
      site_->registered.store(true, std::memory_order_release);
    }
  }
}

void reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Site* s : sites()) {
    s->ns = 0;
    s->calls = 0;
    s->bytes = 0;
  }
}

std::vector<Entry> snapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Entry> out;
  for (const Site* s : sites()) {
    if (s->calls.load() == 0) continue;
    Entry* e = nullptr;
    for (Entry& x : out)
      if (x.name == s->name) e = &x;
    if (!e) {
      out.push_back(Entry{s->name});
      e = &out.back();
    }
    e->seconds += static_cast<double>(s->ns.load()) * 1e-9;
    e->calls += s->calls.load();
    e->bytes += s->bytes.load();
  }
  return out;
}

}  // namespace tern::profile
