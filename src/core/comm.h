// Communication between the processes of one job (tensor/expert-parallel decode across ranks). The interface is
// here, below every layer that computes; the MPI implementation is src/dist/ (Open MPI), linked only into the
// binaries. A process that was not started by mpirun has one rank: world() is then a Comm of size 1 whose
// collectives copy, so every code path is the same with or without MPI.
//
// Every rank of a job runs the same commands on the same data (SPMD): collectives must be called by all ranks in
// the same order. A rank that fails calls fail_job(), which ends every rank (never a hang at the next collective).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tern {

struct CommStats {
  int64_t calls = 0;    // collectives
  uint64_t bytes = 0;   // bytes this rank sent
  double seconds = 0;   // time spent in collectives (waiting for the slowest rank included)
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local" or "MPI (Open MPI ...)"
  // Every rank's `bytes[r]` bytes, in rank order, into `out` on every rank (this rank sends `in`, bytes[rank()]).
  virtual void allgather(const void* in, void* out, const std::vector<size_t>& bytes) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // The same for a message ranks may wait long for (a server's followers between requests): every rank calls this
  // one for it (not broadcast), and waiting ranks sleep between polls instead of spinning on a core.
  virtual void broadcast_idle(void* data, size_t bytes, int root) { broadcast(data, bytes, root); }
  // Ends every rank of the job with exit status `code` after this rank has printed its message.
  [[noreturn]] virtual void abort(int code) = 0;
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

// The job's communicator: set once at start (dist::init_world) or a local Comm of size 1.
Comm& world();
void set_world(std::unique_ptr<Comm> comm);
// A Comm of one rank (its own object: tests run a one-rank forward beside an N-rank one in the same process).
std::unique_ptr<Comm> make_local_comm();

// x[0..n) becomes the sum over ranks of every rank's x, added in rank order on every rank, so every rank holds the
// same bits (an MPI all-reduce may associate differently on different ranks; the ranks' residual streams must not
// drift apart). `scratch` is reused. One rank: x unchanged.
void sum_over_ranks(Comm& comm, float* x, int64_t n, std::vector<float>& scratch);

// Which columns of a row-major [n_rows, total] matrix each rank holds: rank r holds the column runs blocks[r]
// (first global column, width), side by side in that order in its own [n_rows, local(r)] rows.
struct ColumnLayout {
  int64_t total = 0;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> blocks;  // [rank] -> runs
  int64_t local(int r) const;
  // Equal contiguous shares of `total` columns (Split with `align`), one run per rank.
  static ColumnLayout contiguous(int64_t total, int64_t align, int ranks);
};
// Every rank's columns of [n_rows, total] into `out` on every rank (this rank sends `mine`, [n_rows, local(rank)]).
// Exact: values are moved, not combined.
void gather_columns(Comm& comm, const ColumnLayout& layout, const float* mine, int64_t n_rows, float* out,
                    std::vector<float>& scratch);

// The smallest of every rank's `v` (the same on every rank): settings each rank chose from its own machine (context
// size from free memory) agree before they shape the work.
int64_t min_over_ranks(Comm& comm, int64_t v);
int64_t max_over_ranks(Comm& comm, int64_t v);
// FNV-1a 64 of `n` bytes (identity checks across ranks, not security).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);

// Equal shares of [0, n) for `parts` ranks, each boundary a multiple of `align` (the last share takes the rest):
// share r is [begin(r), begin(r + 1)).
struct Split {
  int64_t n = 0, align = 1;
  int parts = 1;
  int64_t begin(int r) const;
  int64_t size(int r) const { return begin(r + 1) - begin(r); }
};

}  // namespace tern
