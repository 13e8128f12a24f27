// The thread pool: OpenMP. Work is split into fixed chunks whose results never depend on the thread count
// (each output element is reduced by one thread in a fixed order).
#pragma once
#include <cstdint>

namespace tern {

int n_threads();                 // threads parallel_for uses
void set_n_threads(int n);       // n <= 0: all hardware threads; logs the choice once

template <typename F>
void parallel_for(int64_t n, F&& fn) {
#pragma omp parallel for schedule(static) num_threads(n_threads())
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace tern
