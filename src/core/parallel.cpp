#include "core/parallel.h"

#include <omp.h>

#include "core/log.h"

namespace tern {

static int g_threads = 0;

int n_threads() {
  if (g_threads <= 0) g_threads = omp_get_num_procs();
  return g_threads;
}

void set_n_threads(int n) {
  const int hw = omp_get_num_procs();
  g_threads = n > 0 ? n : hw;
  if (n <= 0) log::debug("threads: %d (all hardware threads)", g_threads);
}

}  // namespace tern
