// A weight matrix as the blocks see it: the backend's Matrix (backend/matrix.h), in the file's layout or
// repacked for the backend's kernels. Products run through backend::Backend::matmul.
#pragma once
#include "backend/matrix.h"

namespace tern::models {

using Linear = backend::Matrix;

}  // namespace tern::models
