// The thread pool behind parallel_for / parallel_region (see parallel.h for the contract). One pool per process,
// created on first use; one region at a time (a second caller runs serially); workers joined at exit.
//
// Handing out a region: the caller writes the job, then publishes [epoch, open slots] in one 64-bit word and bumps
// the 32-bit epoch the workers wait on. A worker joins by taking a slot with a compare-exchange that also checks the
// epoch, so it joins each region at most once and never one it has not seen published. A loop (parallel_for) opens
// min(workers, chunks - 1) slots and closes the rest once its chunks are all taken: a worker that wakes late (the
// machine is shared) is not waited for. A region (parallel_region) needs all its threads, so it waits for all.
#include "core/parallel.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/log.h"

namespace tern {

namespace {

constexpr int kMaxThreads = 1024;
// A loop is cut into at most this many chunks, by n alone: enough that a thread which falls behind costs the others
// at most one chunk's worth of waiting, few enough that taking a chunk (one atomic add) is noise.
constexpr int64_t kChunksPerLoop = 256;
// Waiting: spin with pause for up to kSpin (about the cost of a futex sleep and wake-up, so spinning never wastes
// more than sleeping would have cost), then yield kYields times (lets a descheduled thread of ours, or the other
// process, run), then sleep on the futex.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr int kYields = 4;

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, nullptr, nullptr, 0);
}

// A 32-bit word that threads wait on until a predicate of its value holds. Whoever changes it calls wake(), which
// makes a system call only when somebody sleeps (the seq_cst sleepers count against the seq_cst change of value:
// either the waiter sees the new value or the waker sees the sleeper; the futex re-checks the value itself).
struct WaitWord {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};

  template <typename Done>
  uint32_t wait(Done done) {
    uint32_t v = value.load(std::memory_order_acquire);
    if (done(v)) return v;
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 1;; ++i) {
      cpu_relax();
      v = value.load(std::memory_order_acquire);
      if (done(v)) return v;
      if ((i & 63) == 0 && std::chrono::steady_clock::now() >= deadline) break;
    }
    for (int i = 0; i < kYields; ++i) {
      sched_yield();
      v = value.load(std::memory_order_acquire);
      if (done(v)) return v;
    }
    for (;;) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      v = value.load(std::memory_order_seq_cst);
      if (!done(v)) futex(&value, FUTEX_WAIT_PRIVATE, v);  // returns at once if value is no longer v
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
      v = value.load(std::memory_order_acquire);
      if (done(v)) return v;
    }
  }
  void wake(int n = INT_MAX) {
    if (sleepers.load(std::memory_order_seq_cst) > 0) futex(&value, FUTEX_WAKE_PRIVATE, static_cast<uint32_t>(n));
  }
};

// Thrown by barrier() and for_each() in the other threads once one thread's body has thrown; never leaves the pool.
struct RegionAborted {};

// True on the pool's workers, and on a caller while its region runs: a nested loop or region then runs serially.
thread_local bool t_in_pool = false;

struct InPool {
  InPool() { t_in_pool = true; }
  ~InPool() { t_in_pool = false; }
};

std::atomic<int> g_threads{0};
std::atomic<bool> g_pool_gone{false};  // set when the pool is destroyed at exit; later calls run serially

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned h = std::thread::hardware_concurrency();
  return h > 0 ? static_cast<int>(h) : 1;
}

int64_t chunk_size(int64_t n) { return (n + kChunksPerLoop - 1) / kChunksPerLoop; }

}  // namespace

int n_threads() {
  int t = g_threads.load(std::memory_order_relaxed);
  if (t <= 0) {
    t = hardware_threads();
    g_threads.store(t, std::memory_order_relaxed);
  }
  return t;
}

void set_n_threads(int n) {
  if (n > kMaxThreads) fail("threads: %d is more than the %d supported", n, kMaxThreads);
  g_threads.store(n > 0 ? n : hardware_threads(), std::memory_order_relaxed);
  if (n <= 0) log::debug("threads: %d (all hardware threads)", g_threads.load(std::memory_order_relaxed));
}

namespace detail {

class Pool {
 public:
  ~Pool();
  static Pool& get() {
    static Pool pool;
    return pool;
  }
  std::mutex& region_mutex() { return region_mu_; }

  // Loop mode (parallel_for) and region mode (parallel_region); the caller holds region_mutex().
  void loop(int64_t n, ChunkFn call, void* fn);
  void region(int threads, RegionFn call, void* fn);

  void barrier(int threads);
  void for_each(const ThreadCtx& ctx, int64_t n, ChunkFn call, void* fn);

 private:
  struct Job {
    int threads = 0;  // region mode: threads of the region, caller included; 0 in loop mode
    RegionFn call_region = nullptr;
    ChunkFn call_chunk = nullptr;
    void* fn = nullptr;
    int64_t n = 0, chunk = 0, n_chunks = 0;  // loop mode
  };

  void resize(int workers);
  void stop_workers();
  void worker_main(uint32_t seen);
  uint32_t open(const Job& job, uint32_t slots);
  void participate(uint32_t slot);
  void run_chunks(int64_t n, int64_t chunk, int64_t n_chunks, ChunkFn call, void* fn);
  template <typename Body>
  void guarded(Body&& body);
  void rethrow();

  std::mutex region_mu_;  // held by the caller of the running region
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  WaitWord epoch_;                      // bumped to publish a region, or to stop the workers
  std::atomic<uint64_t> state_{0};      // [epoch:32][open slots:32]; a worker joins by taking a slot
  WaitWord finished_;                   // workers that have left the current region
  std::atomic<int64_t> next_chunk_{0};  // the next chunk of the current loop or for_each
  WaitWord barrier_gen_;                // bumped when the last thread arrives at a barrier, or on abort
  std::atomic<uint32_t> barrier_arrived_{0};
  std::atomic<bool> aborted_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
  Job job_;  // written by the caller before it opens slots; read by a worker after it has taken one
};

Pool::~Pool() {
  g_pool_gone.store(true);
  // A region still running at exit (another thread called exit) keeps its threads: they end with the process.
  if (!region_mu_.try_lock()) {
    for (auto& t : workers_) t.detach();
    return;
  }
  stop_workers();
  region_mu_.unlock();
}

void Pool::stop_workers() {
  if (workers_.empty()) return;
  stop_.store(true, std::memory_order_release);
  epoch_.value.fetch_add(1, std::memory_order_seq_cst);
  epoch_.wake();
  for (auto& t : workers_) t.join();
  workers_.clear();
  stop_.store(false, std::memory_order_relaxed);
}

void Pool::resize(int workers) {
  if (static_cast<int>(workers_.size()) == workers) return;
  stop_workers();
  const uint32_t seen = epoch_.value.load(std::memory_order_relaxed);
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    try {
      workers_.emplace_back([this, seen] { worker_main(seen); });
    } catch (const std::system_error& e) {
      fail("threads: cannot start worker thread %d of %d: %s", i + 1, workers, e.what());
    }
  }
  log::debug("thread pool: %d workers and the calling thread (not pinned)", workers);
}

void Pool::worker_main(uint32_t seen) {
  // Signals belong to the threads the program made for them (tern serve's waiter), never to a worker.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  t_in_pool = true;
  for (;;) {
    seen = epoch_.wait([seen](uint32_t v) { return v != seen; });
    if (stop_.load(std::memory_order_acquire)) return;
    uint64_t s = state_.load(std::memory_order_acquire);
    while (static_cast<uint32_t>(s >> 32) == seen && static_cast<uint32_t>(s) > 0) {
      if (state_.compare_exchange_weak(s, s - 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        participate(static_cast<uint32_t>(s));
        finished_.value.fetch_add(1, std::memory_order_seq_cst);
        finished_.wake();
        break;
      }
    }
  }
}

uint32_t Pool::open(const Job& job, uint32_t slots) {
  job_ = job;
  finished_.value.store(0, std::memory_order_relaxed);
  next_chunk_.store(0, std::memory_order_relaxed);
  barrier_arrived_.store(0, std::memory_order_relaxed);
  aborted_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  const uint32_t e = epoch_.value.load(std::memory_order_relaxed) + 1;
  state_.store(uint64_t{e} << 32 | slots, std::memory_order_release);
  epoch_.value.store(e, std::memory_order_seq_cst);
  epoch_.wake(job.threads > 0 ? INT_MAX : static_cast<int>(slots));
  return e;
}

// Runs body; the first exception (other than the pool's own RegionAborted) is kept, and the other threads stop.
template <typename Body>
void Pool::guarded(Body&& body) {
  try {
    body();
  } catch (const RegionAborted&) {
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    aborted_.store(true, std::memory_order_seq_cst);
    barrier_gen_.value.fetch_add(1, std::memory_order_seq_cst);  // wakes the threads waiting at a barrier
    barrier_gen_.wake();
  }
}

void Pool::rethrow() {
  std::exception_ptr e;
  std::swap(e, error_);
  if (e) std::rethrow_exception(e);
}

void Pool::participate(uint32_t slot) {
  const Job& job = job_;
  if (job.threads > 0) {
    // Slots count down from threads - 1: the first worker in is thread 1.
    ThreadCtx ctx(this, job.threads - static_cast<int>(slot), job.threads);
    guarded([&] { job.call_region(job.fn, ctx); });
  } else {
    guarded([&] { run_chunks(job.n, job.chunk, job.n_chunks, job.call_chunk, job.fn); });
  }
}

void Pool::run_chunks(int64_t n, int64_t chunk, int64_t n_chunks, ChunkFn call, void* fn) {
  while (!aborted_.load(std::memory_order_relaxed)) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= n_chunks) return;
    const int64_t begin = c * chunk;
    call(fn, begin, std::min(n, begin + chunk));
  }
}

void Pool::loop(int64_t n, ChunkFn call, void* fn) {
  const int threads = n_threads();
  const int64_t chunk = chunk_size(n), n_chunks = (n + chunk - 1) / chunk;
  resize(threads - 1);
  InPool in_pool;
  Job job;
  job.call_chunk = call;
  job.fn = fn;
  job.n = n;
  job.chunk = chunk;
  job.n_chunks = n_chunks;
  const uint32_t slots = static_cast<uint32_t>(std::min<int64_t>(threads - 1, n_chunks - 1));
  const uint32_t e = open(job, slots);
  guarded([&] { run_chunks(n, chunk, n_chunks, call, fn); });
  // Every chunk is taken: close the slots nobody took, then wait only for the workers that joined.
  const uint64_t s = state_.exchange(uint64_t{e} << 32, std::memory_order_acq_rel);
  const uint32_t joined = slots - static_cast<uint32_t>(s);
  finished_.wait([joined](uint32_t v) { return v == joined; });
  rethrow();
}

void Pool::region(int threads, RegionFn call, void* fn) {
  resize(threads - 1);
  InPool in_pool;
  Job job;
  job.threads = threads;
  job.call_region = call;
  job.fn = fn;
  open(job, static_cast<uint32_t>(threads - 1));
  ThreadCtx ctx(this, 0, threads);
  guarded([&] { call(fn, ctx); });
  const uint32_t workers = static_cast<uint32_t>(threads - 1);
  finished_.wait([workers](uint32_t v) { return v == workers; });
  rethrow();
}

void Pool::barrier(int threads) {
  // The generation is read before the abort check: an abort after this read bumps it and wakes us.
  const uint32_t gen = barrier_gen_.value.load(std::memory_order_seq_cst);
  if (aborted_.load(std::memory_order_seq_cst)) throw RegionAborted{};
  if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) == static_cast<uint32_t>(threads - 1)) {
    // Last in: nobody is taking chunks now, so the next for_each starts from chunk 0.
    barrier_arrived_.store(0, std::memory_order_relaxed);
    next_chunk_.store(0, std::memory_order_relaxed);
    barrier_gen_.value.fetch_add(1, std::memory_order_seq_cst);
    barrier_gen_.wake();
  } else {
    barrier_gen_.wait([gen](uint32_t v) { return v != gen; });
  }
  if (aborted_.load(std::memory_order_acquire)) throw RegionAborted{};
}

void Pool::for_each(const ThreadCtx& ctx, int64_t n, ChunkFn call, void* fn) {
  if (n > 0) {
    const int64_t chunk = chunk_size(n);
    run_chunks(n, chunk, (n + chunk - 1) / chunk, call, fn);
  }
  if (aborted_.load(std::memory_order_relaxed)) throw RegionAborted{};
  barrier(ctx.n_threads());
}

void run_loop(int64_t n, ChunkFn call, void* fn) {
  if (n <= 0) return;
  if (n == 1 || n_threads() == 1 || t_in_pool || g_pool_gone.load(std::memory_order_relaxed)) {
    call(fn, 0, n);
    return;
  }
  Pool& pool = Pool::get();
  std::unique_lock<std::mutex> lock(pool.region_mutex(), std::try_to_lock);
  if (!lock.owns_lock()) {
    call(fn, 0, n);  // another thread's region holds the pool
    return;
  }
  pool.loop(n, call, fn);
}

void run_region(int threads, RegionFn call, void* fn) {
  if (threads <= 0) threads = n_threads();
  if (threads > kMaxThreads) fail("threads: %d is more than the %d supported", threads, kMaxThreads);
  if (threads > 1 && !t_in_pool && !g_pool_gone.load(std::memory_order_relaxed)) {
    Pool& pool = Pool::get();
    std::unique_lock<std::mutex> lock(pool.region_mutex(), std::try_to_lock);
    if (lock.owns_lock()) {
      pool.region(threads, call, fn);
      return;
    }
  }
  ThreadCtx ctx(nullptr, 0, 1);
  call(fn, ctx);
}

}  // namespace detail

void ThreadCtx::barrier() {
  if (pool_) pool_->barrier(n_);
}

void ThreadCtx::for_each_erased(int64_t n, detail::ChunkFn call, void* fn) {
  if (!pool_) {
    if (n > 0) call(fn, 0, n);
    return;
  }
  pool_->for_each(*this, n, call, fn);
}

}  // namespace tern
