// The thread pool: tern's own (no OpenMP). Persistent workers (n_threads() - 1; the calling thread works too) take
// the chunks of a loop from one atomic counter, so a thread that another process has descheduled leaves its share to
// the others. Idle workers spin briefly, then sleep on a futex and burn no CPU. Threads are not pinned: the machine
// is shared, and the kernel's scheduler places threads better than a fixed map when another process runs.
//
// Determinism: a loop over [0, n) is cut into chunks by n alone, and fn(i) runs exactly once for each i, on some
// thread. Results never depend on the thread count or on which thread ran a chunk as long as fn(i) writes only what
// belongs to i (every caller in tern reduces each output element in one fixed order inside one fn(i)).
//
// Nesting: a parallel_for or parallel_region called from inside a region or a loop body (or from any thread while
// another thread's region holds the pool) runs serially on the calling thread; it never deadlocks.
// Exceptions: the first exception a loop body or region body throws is rethrown on the calling thread once every
// thread has left the region; the remaining chunks are skipped, and the pool keeps working.
#pragma once
#include <cstdint>
#include <memory>
#include <type_traits>

namespace tern {

int n_threads();            // threads a loop or region uses (the calling thread included)
void set_n_threads(int n);  // n <= 0: all hardware threads this process may run on; logs the choice once

class ThreadCtx;

namespace detail {
class Pool;
using ChunkFn = void (*)(void* fn, int64_t begin, int64_t end);  // runs fn(i) for i in [begin, end)
using RegionFn = void (*)(void* fn, ThreadCtx& ctx);
void run_loop(int64_t n, ChunkFn call, void* fn);
void run_region(int threads, RegionFn call, void* fn);

template <typename F>
void* erase(F& fn) {
  return const_cast<void*>(static_cast<const void*>(std::addressof(fn)));
}
template <typename F>
void call_chunk(void* fn, int64_t begin, int64_t end) {
  auto& f = *static_cast<std::remove_reference_t<F>*>(fn);
  for (int64_t i = begin; i < end; ++i) f(i);
}
template <typename F>
void call_region(void* fn, ThreadCtx& ctx) {
  (*static_cast<std::remove_reference_t<F>*>(fn))(ctx);
}
}  // namespace detail

// One thread's view of a parallel region. Every thread of the region runs the region body (SPMD) and must make the
// same sequence of for_each / barrier calls.
class ThreadCtx {
 public:
  int thread_id() const { return id_; }  // in [0, n_threads()); 0 is the thread that opened the region
  int n_threads() const { return n_; }   // may be fewer than asked: 1 when nested or when the pool is busy

  // fn(i) for each i in [0, n) exactly once, the chunks (fixed by n alone) shared dynamically among the region's
  // threads; returns when every thread has arrived (an implied barrier, so fn's writes are visible after it).
  template <typename F>
  void for_each(int64_t n, F&& fn) {
    for_each_erased(n, &detail::call_chunk<F>, detail::erase(fn));
  }
  // Waits until every thread of the region has arrived; writes before it are visible to all threads after it.
  void barrier();

 private:
  friend class detail::Pool;
  friend void detail::run_region(int, detail::RegionFn, void*);
  ThreadCtx(detail::Pool* pool, int id, int n) : pool_(pool), id_(id), n_(n) {}
  void for_each_erased(int64_t n, detail::ChunkFn call, void* fn);

  detail::Pool* pool_;  // null: a one-thread region, run serially
  int id_, n_;
};

// fn(i) for each i in [0, n) exactly once, on the pool's threads; returns when all are done.
template <typename F>
void parallel_for(int64_t n, F&& fn) {
  detail::run_loop(n, &detail::call_chunk<F>, detail::erase(fn));
}

// Runs fn(ThreadCtx&) once on each of n_threads() threads (the caller is thread 0) and returns when all are done:
// one fork/join for several phases separated by ctx.for_each / ctx.barrier.
template <typename F>
void parallel_region(F&& fn) {
  detail::run_region(0, &detail::call_region<F>, detail::erase(fn));
}
// The same with an explicit thread count (threads <= 0: n_threads()); the pool is resized to it for this region.
template <typename F>
void parallel_region(int threads, F&& fn) {
  detail::run_region(threads, &detail::call_region<F>, detail::erase(fn));
}

}  // namespace tern
