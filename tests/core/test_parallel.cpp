// core/parallel: the thread pool. Every index exactly once for any n and thread count (more threads than cores
// included), nested calls run serially, exceptions reach the caller and leave the pool working, regions with
// barriers, many tiny regions (no lost wake-ups), concurrent callers, idle workers sleep, clean exit.
#include <gtest/gtest.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

using namespace tern;

namespace {

// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = n_threads();
  ~ThreadsGuard() { set_n_threads(saved); }
};

const int kThreadCounts[] = {1, 2, 3, 8};

void expect_each_once(const std::vector<std::atomic<int>>& hits, const std::string& what) {
  for (size_t i = 0; i < hits.size(); ++i)
    if (hits[i].load() != 1) {
      ADD_FAILURE() << what << ": index " << i << " visited " << hits[i].load() << " times";
      return;
    }
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

TEST(Parallel, ForVisitsEveryIndexOnce) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    EXPECT_EQ(n_threads(), t);
    for (int64_t n : {0, 1, 2, 3, 7, 255, 256, 257, 511, 1000, 4099, 100003}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, [&](int64_t i) { hits[i].fetch_add(1); });
      expect_each_once(hits, "threads " + std::to_string(t) + " n " + std::to_string(n));
    }
  }
}

TEST(Parallel, NegativeCountRunsNothing) {
  int calls = 0;
  parallel_for(-5, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// Results written per index are the same for every thread count (the contract every kernel relies on).
TEST(Parallel, ResultsIndependentOfThreadCount) {
  ThreadsGuard guard;
  const int64_t n = 3001;
  std::vector<double> want;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    std::vector<double> out(n);
    parallel_for(n, [&](int64_t i) {
      double s = 0;
      for (int64_t k = 0; k <= i % 97; ++k) s += 1.0 / static_cast<double>(i + k + 1);
      out[i] = s;
    });
    if (want.empty()) want = out;
    EXPECT_EQ(out, want) << "threads " << t;
  }
}

TEST(Parallel, NestedForRunsSeriallyOnTheCallingThread) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    const int64_t outer = 13, inner = 300;
    std::vector<std::atomic<int>> hits(outer * inner);
    std::atomic<int> foreign{0};
    parallel_for(outer, [&](int64_t o) {
      const auto me = std::this_thread::get_id();
      parallel_for(inner, [&](int64_t i) {
        if (std::this_thread::get_id() != me) foreign.fetch_add(1);
        hits[o * inner + i].fetch_add(1);
      });
    });
    expect_each_once(hits, "nested, threads " + std::to_string(t));
    EXPECT_EQ(foreign.load(), 0);
    // A region inside a loop body: one thread, the body's own.
    std::vector<std::atomic<int>> region_hits(outer * inner);
    parallel_for(outer, [&](int64_t o) {
      parallel_region([&](ThreadCtx& ctx) {
        if (ctx.n_threads() != 1) foreign.fetch_add(1);
        ctx.for_each(inner, [&](int64_t i) { region_hits[o * inner + i].fetch_add(1); });
      });
    });
    expect_each_once(region_hits, "region in a loop, threads " + std::to_string(t));
    EXPECT_EQ(foreign.load(), 0);
  }
}

TEST(Parallel, NestedInsideRegion) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    const int64_t n = 500;
    std::vector<std::atomic<int>> a(n), b(n * t), c(n * t);
    parallel_region([&](ThreadCtx& ctx) {
      // A parallel_for and a nested region inside a region: both serial on this thread, so every thread does all n.
      parallel_for(n, [&](int64_t i) { b[ctx.thread_id() * n + i].fetch_add(1); });
      parallel_region([&](ThreadCtx& inner) {
        EXPECT_EQ(inner.n_threads(), 1);
        inner.for_each(n, [&](int64_t i) { c[ctx.thread_id() * n + i].fetch_add(1); });
        inner.barrier();
      });
      ctx.for_each(n, [&](int64_t i) {
        parallel_for(1, [&](int64_t) { a[i].fetch_add(1); });
      });
    });
    expect_each_once(a, "for_each, threads " + std::to_string(t));
    expect_each_once(b, "parallel_for in a region, threads " + std::to_string(t));
    expect_each_once(c, "region in a region, threads " + std::to_string(t));
  }
}

TEST(Parallel, ExceptionReachesCallerAndPoolKeepsWorking) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    for (int64_t bad : {0, 37, 999}) {
      try {
        parallel_for(1000, [&](int64_t i) {
          if (i == bad) fail("index %lld is bad", static_cast<long long>(i));
        });
        ADD_FAILURE() << "no exception, threads " << t;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "index " + std::to_string(bad) + " is bad");
      }
    }
    // Every index throws: exactly one exception arrives.
    EXPECT_THROW(parallel_for(64, [](int64_t) { throw std::runtime_error("all"); }), std::runtime_error);
    std::vector<std::atomic<int>> hits(777);
    parallel_for(777, [&](int64_t i) { hits[i].fetch_add(1); });
    expect_each_once(hits, "after exceptions, threads " + std::to_string(t));
  }
}

// A thread that throws leaves the others waiting at a barrier; they must be released, not deadlock.
TEST(Parallel, ExceptionInRegionReleasesBarriers) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    for (int thrower = 0; thrower < t; ++thrower) {
      std::atomic<int> after{0};
      try {
        parallel_region(t, [&](ThreadCtx& ctx) {
          ctx.barrier();
          if (ctx.thread_id() == thrower) fail("thread %d failed", thrower);
          ctx.barrier();
          after.fetch_add(1);
          ctx.for_each(100, [](int64_t) {});
        });
        ADD_FAILURE() << "no exception, threads " << t;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "thread " + std::to_string(thrower) + " failed");
      }
      EXPECT_EQ(after.load(), 0) << "a thread passed a barrier the thrower never reached";
    }
    // Throwing from inside for_each, on whichever thread takes the chunk.
    EXPECT_THROW(parallel_region(t, [&](ThreadCtx& ctx) {
                   ctx.for_each(1000, [](int64_t i) {
                     if (i == 500) fail("chunk 500");
                   });
                   ctx.barrier();
                 }),
                 Error);
    std::atomic<int64_t> sum{0};
    parallel_region(t, [&](ThreadCtx& ctx) { ctx.for_each(100, [&](int64_t i) { sum.fetch_add(i); }); });
    EXPECT_EQ(sum.load(), 4950) << "after exceptions, threads " << t;
  }
}

TEST(Parallel, RegionThreadIdsAndBarriers) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    const int64_t n = 2053;
    std::vector<int64_t> a(n), b(n);
    std::vector<int> ids(t, 0);
    std::vector<int64_t> partial(t, 0);
    int64_t total = -1;
    std::atomic<int> seen_n{0};
    parallel_region([&](ThreadCtx& ctx) {
      if (ctx.n_threads() == t) seen_n.fetch_add(1);
      ids[ctx.thread_id()] += 1;
      ctx.for_each(n, [&](int64_t i) { a[i] = i * 3; });
      // Reads what other threads wrote in the previous phase: needs for_each's implied barrier.
      ctx.for_each(n, [&](int64_t i) { b[i] = a[n - 1 - i] + 1; });
      // Static partition by thread id, then a reduction by thread 0 after an explicit barrier.
      int64_t s = 0;
      for (int64_t i = ctx.thread_id(); i < n; i += ctx.n_threads()) s += b[i];
      partial[ctx.thread_id()] = s;
      ctx.barrier();
      if (ctx.thread_id() == 0) total = std::accumulate(partial.begin(), partial.end(), int64_t{0});
      ctx.barrier();
      EXPECT_EQ(total, int64_t{3} * n * (n - 1) / 2 + n);
    });
    EXPECT_EQ(seen_n.load(), t);
    for (int id = 0; id < t; ++id) EXPECT_EQ(ids[id], 1) << "thread id " << id << ", threads " << t;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[i], (n - 1 - i) * 3 + 1) << i;
  }
}

TEST(Parallel, RegionWithExplicitThreadCount) {
  ThreadsGuard guard;
  set_n_threads(2);
  std::set<int> ids;
  std::mutex mu;
  parallel_region(5, [&](ThreadCtx& ctx) {
    EXPECT_EQ(ctx.n_threads(), 5);
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(ctx.thread_id());
  });
  EXPECT_EQ(ids, (std::set<int>{0, 1, 2, 3, 4}));
  std::vector<std::atomic<int>> hits(1234);
  parallel_for(1234, [&](int64_t i) { hits[i].fetch_add(1); });  // back at 2 threads
  expect_each_once(hits, "after a 5-thread region");
}

// Many tiny loops and regions back to back: a lost wake-up or a missed region would hang here.
TEST(Parallel, ManyTinyRegions) {
  ThreadsGuard guard;
  for (int t : kThreadCounts) {
    set_n_threads(t);
    const int iters = t > 3 ? 500 : 5000;  // 8 threads on 2 cores: every region waits for descheduled threads
    int64_t bad = 0;
    for (int it = 0; it < iters; ++it) {
      std::atomic<int64_t> sum{0};
      const int64_t n = 2 + it % 5;
      parallel_for(n, [&](int64_t i) { sum.fetch_add(i + 1); });
      bad += sum.load() != n * (n + 1) / 2;
      parallel_region([&](ThreadCtx& ctx) {
        ctx.barrier();
        ctx.for_each(n, [&](int64_t i) { sum.fetch_add(i + 1); });
      });
      bad += sum.load() != n * (n + 1);
    }
    EXPECT_EQ(bad, 0) << "threads " << t;
  }
}

// Two threads of the program calling at once: one gets the pool, the other runs serially; both are right.
TEST(Parallel, ConcurrentCallers) {
  ThreadsGuard guard;
  set_n_threads(3);
  auto work = [](int64_t* bad) {
    for (int it = 0; it < 300; ++it) {
      std::vector<std::atomic<int>> hits(500 + it);
      parallel_for(static_cast<int64_t>(hits.size()), [&](int64_t i) { hits[i].fetch_add(1); });
      for (auto& h : hits) *bad += h.load() != 1;
      std::atomic<int64_t> sum{0};
      parallel_region([&](ThreadCtx& ctx) { ctx.for_each(100, [&](int64_t i) { sum.fetch_add(i); }); });
      *bad += sum.load() != 4950;
    }
  };
  int64_t bad1 = 0, bad2 = 0;
  std::thread other(work, &bad2);
  work(&bad1);
  other.join();
  EXPECT_EQ(bad1, 0);
  EXPECT_EQ(bad2, 0);
}

// Idle workers sleep: after a region, the process uses (almost) no CPU while it waits. CPU time, not speed: the
// spin is 20 us of wall time, so 200 ms of idling costs well under the 40 ms allowed even on a loaded machine.
TEST(Parallel, IdleWorkersSleep) {
  ThreadsGuard guard;
  set_n_threads(8);
  std::atomic<int64_t> sum{0};
  parallel_for(1000, [&](int64_t i) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double used = process_cpu_seconds() - cpu0;
  EXPECT_LT(used, 0.040) << "idle workers used " << used * 1e3 << " ms of CPU in 200 ms";
}

TEST(Parallel, TooManyThreadsIsAnError) {
  ThreadsGuard guard;
  EXPECT_THROW(set_n_threads(100000), Error);
  EXPECT_THROW(parallel_region(100000, [](ThreadCtx&) {}), Error);
}

// Exit with live workers, and a loop run from a static destructor after the pool is gone: both clean.
TEST(ParallelDeathTest, CleanExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct AtExit {
          ~AtExit() {
            std::vector<std::atomic<int>> hits(300);
            parallel_for(300, [&](int64_t i) { hits[i].fetch_add(1); });
            for (auto& h : hits)
              if (h.load() != 1) std::_Exit(3);
          }
        };
        static AtExit at_exit;  // constructed before the pool, so destroyed after it
        set_n_threads(3);
        std::atomic<int64_t> sum{0};
        parallel_for(1000, [&](int64_t i) { sum.fetch_add(i); });
        std::exit(sum.load() == 999 * 1000 / 2 ? 0 : 2);
      },
      testing::ExitedWithCode(0), "");
}
