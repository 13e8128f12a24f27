// A one-line progress bar on stderr, drawn only when stderr is a terminal and the work takes more than a
// moment (silent otherwise, so logs and pipes stay clean).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace tern {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();  // clears the bar's line if one was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(uint64_t done, uint64_t total);  // bytes (or any unit) done of total

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  bool tty_ = false, drawn_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace tern
