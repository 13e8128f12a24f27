// A forward batch: the new tokens of several sequences stacked as rows [n_rows, n_embd]; each segment says
// which rows belong to which sequence. Projections and the MoE run over all rows at once (weights read once);
// attention and the DeltaNet recurrence run per segment against that sequence's state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tern::models {

class SequenceState;

struct Segment {
  SequenceState* state = nullptr;
  int64_t row0 = 0;      // first row of this sequence in the batch
  int64_t n_tokens = 0;  // its new tokens; positions state->n_past() .. + n_tokens - 1
};

// Reusable scratch buffer: grows, never shrinks, so steady-state decode does not allocate.
template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace tern::models
