// Byte-level reshaping the formats need, for a tensor of any dtype on the host.
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::convert::detail {

// The transpose of a 2-D tensor: [r, c] -> [c, r].
Tensor transposed(const Tensor& matrix);
// A copy of a 2-D tensor with `rows` rows: its first min(rows, its rows) rows, then zeros.
Tensor with_rows(const Tensor& matrix, std::int64_t rows);

}  // namespace loom::convert::detail
