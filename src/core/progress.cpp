#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace tern {

namespace {
constexpr double kShowAfterSeconds = 0.4;   // quick loads draw nothing
constexpr double kRedrawEverySeconds = 0.1;
constexpr int kWidth = 30;
}  // namespace

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), tty_(isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!tty_ || total == 0) return;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < kShowAfterSeconds) return;
  if (drawn_ && done < total && std::chrono::duration<double>(now - last_draw_).count() < kRedrawEverySeconds) return;
  last_draw_ = now;
  drawn_ = true;
  const double frac = done >= total ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const int fill = static_cast<int>(frac * kWidth);
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3.0f%%  %.1f/%.1f GiB  eta %.0fs\033[K", label_.c_str(), fill,
               "==============================", kWidth - fill, "", frac * 100, done / 1073741824.0,
               total / 1073741824.0, eta);
  std::fflush(stderr);
}

}  // namespace tern
