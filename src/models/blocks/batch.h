// A forward batch: the new tokens of several sequences stacked as rows [n_rows, n_embd]; each segment says
// which rows belong to which sequence. Projections and the MoE run over all rows at once (weights read once);
// attention and the DeltaNet recurrence run per segment against that sequence's state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace tern::models {

class SequenceState;

struct Segment {
  SequenceState* state = nullptr;
  int64_t row0 = 0;      // first row of this sequence in the batch
  int64_t n_tokens = 0;  // its new tokens; positions state->n_past() .. + n_tokens - 1
};

// Forward scratch lives in the backend (backend::Scratch: grows, never shrinks).
using backend::Scratch;

using backend::grow;  // host-side bookkeeping vectors

}  // namespace tern::models
