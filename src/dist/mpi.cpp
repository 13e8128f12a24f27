#include "dist/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/comm.h"
#include "core/error.h"

namespace tern::dist {
namespace {

using Clock = std::chrono::steady_clock;

int to_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) fail("MPI: %s of %zu bytes is more than one message carries", what, n);
  return static_cast<int>(n);
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI: %s failed: %.*s", what, len, msg);
}

class MpiComm : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    std::string s(v, static_cast<size_t>(len));
    name_ = "MPI (" + s.substr(0, s.find_first_of(",\n")) + ")";
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  void allgather(const void* in, void* out, const std::vector<size_t>& bytes) override {
    if (static_cast<int>(bytes.size()) != size_) fail("internal: allgather with %zu counts on %d ranks", bytes.size(), size_);
    const auto t0 = Clock::now();
    counts_.resize(static_cast<size_t>(size_));
    displs_.resize(static_cast<size_t>(size_));
    size_t off = 0;
    bool equal = true;
    for (int r = 0; r < size_; ++r) {
      counts_[r] = to_int(bytes[r], "an allgather share");
      displs_[r] = to_int(off, "an allgather");
      off += bytes[r];
      equal &= bytes[r] == bytes[0];
    }
    const void* src = in == static_cast<const char*>(out) + displs_[rank_] ? MPI_IN_PLACE : in;
    if (equal)
      check(MPI_Allgather(src, counts_[rank_], MPI_BYTE, out, counts_[0], MPI_BYTE, MPI_COMM_WORLD), "allgather");
    else
      check(MPI_Allgatherv(src, counts_[rank_], MPI_BYTE, out, counts_.data(), displs_.data(), MPI_BYTE, MPI_COMM_WORLD),
            "allgatherv");
    account(bytes[rank_], t0);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    const auto t0 = Clock::now();
    check(MPI_Bcast(data, to_int(bytes, "a broadcast"), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
    account(rank_ == root ? bytes : 0, t0);
  }

  void broadcast_idle(void* data, size_t bytes, int root) override {
    const auto t0 = Clock::now();
    MPI_Request req;
    check(MPI_Ibcast(data, to_int(bytes, "a broadcast"), MPI_BYTE, root, MPI_COMM_WORLD, &req), "broadcast");
    // Spin briefly (a step's message follows the last step at once), then sleep 50 us growing to 2 ms between polls.
    int done = 0;
    for (int i = 0; !done; ++i) {
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "broadcast");
      if (!done && i >= 1000) std::this_thread::sleep_for(std::chrono::microseconds(std::min(2000, 50 << std::min(6, (i - 1000) / 64))));
    }
    account(rank_ == root ? bytes : 0, t0);
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  void account(size_t sent, Clock::time_point t0) {
    ++stats_.calls;
    stats_.bytes += sent;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  int rank_ = 0, size_ = 1;
  std::string name_;
  std::vector<int> counts_, displs_;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

void init_world(int* argc, char*** argv) {
  int provided = 0;
  // Serialized: one thread at a time makes MPI calls, not always the one that called init (the forward's
  // collectives run between the thread pool's regions; tern serve runs its forwards on the scheduler's thread).
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "tern: error: MPI_Init failed\n");
    std::exit(1);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "tern: error: this MPI library does not allow calls from more than one thread, one at a time "
                         "(MPI_THREAD_SERIALIZED; it provides level %d)\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  set_world(std::make_unique<MpiComm>());
}

}  // namespace tern::dist
