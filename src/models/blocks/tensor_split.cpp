#include "models/blocks/tensor_split.h"

#include "core/profile.h"

namespace tern::models {

std::optional<HeadShare> head_share(int64_t n_key, int64_t per, int R, int r) {
  if (n_key >= R) {
    const Split k{n_key, 1, R};
    return HeadShare{k.begin(r), k.size(r), 0, per};
  }
  const int64_t m = R / n_key;
  if (R % n_key != 0 || per % m != 0) return std::nullopt;
  return HeadShare{r / m, 1, (r % m) * (per / m), per / m};
}

void project_out(backend::Backend& be, const Linear& w, const TensorSplit* split, const float* x, int64_t n_rows, float* y,
                 TensorSplitScratch& s) {
  if (!split) {
    be.matmul(w, x, n_rows, y);
    return;
  }
  Comm& comm = *split->comm;
  if (split->partial_sums) {
    be.matmul(w, x, n_rows, y);
    TERN_PROFILE(prof, "comm.sum", 0);
    sum_over_ranks(comm, y, n_rows * w.n_out, s.gather);
    return;
  }
  s.in.resize(static_cast<size_t>(n_rows * split->heads.total));
  {
    TERN_PROFILE(prof, "comm.heads", 0);
    gather_columns(comm, split->heads, x, n_rows, s.in.data(), s.gather);
  }
  s.out.resize(static_cast<size_t>(n_rows * w.n_out));
  be.matmul(w, s.in.data(), n_rows, s.out.data());
  TERN_PROFILE(prof, "comm.rows", 0);
  gather_columns(comm, split->rows, s.out.data(), n_rows, y, s.gather);
}

}  // namespace tern::models
