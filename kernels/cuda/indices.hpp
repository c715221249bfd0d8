// Device-side validation of index tensors (host-compiler safe).
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::kernels::cuda {

// Throws an invalid_argument Error naming `what`, the first offending value and its position
// unless every element of indices (i32 or i64, on a CUDA device) is in [0, limit) or equals
// `allowed`. Waits for `stream`.
void check_index_range(const Tensor& indices, std::int64_t limit, std::int64_t allowed, const char* what, void* stream);

}  // namespace loom::kernels::cuda
