// Element-wise activations and row softmax (see activation.h): scalar twins and the dispatch.
#include "ops/activation.h"

#include "ops/kernels.h"
#include "ops/split.h"

namespace tern::ops {

void sigmoid_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = sigmoid(x[i]);
}

void silu_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = silu(x[i]);
}

void softplus_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = softplus(x[i]);
}

void swiglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

void sigmoid_gate_ref(float* o, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] *= sigmoid(gate[i]);
}

void softmax_rows_ref(float* x, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * n;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = row[i] > mx ? row[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      row[i] = std::exp(row[i] - mx);
      sum += row[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) row[i] *= inv;
  }
}

void sigmoid_inplace(float* x, int64_t n, Isa isa) {
  const Kernels& k = kernels(isa);
  split::elements(n, [&](int64_t i0, int64_t i1) { k.sigmoid(x + i0, i1 - i0); });
}
void silu_inplace(float* x, int64_t n, Isa isa) {
  const Kernels& k = kernels(isa);
  split::elements(n, [&](int64_t i0, int64_t i1) { k.silu(x + i0, i1 - i0); });
}
void softplus_inplace(float* x, int64_t n, Isa isa) {
  const Kernels& k = kernels(isa);
  split::elements(n, [&](int64_t i0, int64_t i1) { k.softplus(x + i0, i1 - i0); });
}
void swiglu(const float* gate, const float* up, float* out, int64_t n, Isa isa) {
  const Kernels& k = kernels(isa);
  split::elements(n, [&](int64_t i0, int64_t i1) { k.swiglu(gate + i0, up + i0, out + i0, i1 - i0); });
}
void softmax_rows(float* x, int64_t n_rows, int64_t n, Isa isa) {
  const Kernels& k = kernels(isa);
  split::rows(n_rows, n, [&](int64_t r0, int64_t r1) { k.softmax_rows(x + r0 * n, r1 - r0, n); });
}

}  // namespace tern::ops
