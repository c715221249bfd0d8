// Device-side validation of index tensors (host-compiler safe).
#pragma once

#include <cstdint>
#include <optional>

#include "loom/core/tensor.hpp"

namespace loom::kernels::cuda {

// Throws an invalid_argument Error naming `what`, the first offending value and its position
// unless every element of indices (i32 or i64, on a CUDA device) is in [0, limit) or equals
// `allowed` (when given). Waits for `stream`: call it once per batch of indices (the forward
// pass), not in every kernel that reads them.
void check_index_range(const Tensor& indices, std::int64_t limit, std::optional<std::int64_t> allowed, const char* what,
                       void* stream);

}  // namespace loom::kernels::cuda
