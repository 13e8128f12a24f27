#include "backend/matrix.h"

#include "core/error.h"
#include "quant/repack.h"

namespace tern::backend {

size_t Matrix::bytes() const {
  return repacked ? quant::repacked_bytes(type, n_out, n_in) : row_bytes * static_cast<size_t>(n_out);
}

Matrix Matrix::rows(int64_t r0, int64_t n) const {
  Matrix s = *this;
  if (repacked) {
    if (r0 % quant::kRepackRows != 0)
      fail("internal: %s: row slice at %lld is not a group boundary", name.c_str(), static_cast<long long>(r0));
    s.data = data + quant::repacked_bytes(type, r0, n_in);
  } else {
    s.data = data + static_cast<size_t>(r0) * row_bytes;
  }
  s.n_out = n;
  return s;
}

}  // namespace tern::backend
