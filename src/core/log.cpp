#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace tern::log {

static std::atomic<Level> g_level{Level::kInfo};
static std::mutex g_mutex;

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

static void emit(Level l, const char* tag, const char* fmt, va_list ap) {
  if (l < g_level.load()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "tern: %s", tag);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
}

#define TERN_LOG_FN(fn, lvl, tag)  \
  void fn(const char* fmt, ...) {  \
    va_list ap;                    \
    va_start(ap, fmt);             \
    emit(lvl, tag, fmt, ap);       \
    va_end(ap);                    \
  }
TERN_LOG_FN(debug, Level::kDebug, "debug: ")
TERN_LOG_FN(info, Level::kInfo, "")
TERN_LOG_FN(warn, Level::kWarn, "warning: ")
TERN_LOG_FN(error, Level::kError, "error: ")
#undef TERN_LOG_FN

}  // namespace tern::log
