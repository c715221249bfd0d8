#include "src/convert/tensor_layout.hpp"

#include <algorithm>
#include <cstring>
#include <span>

#include "loom/core/error.hpp"

namespace loom::convert::detail {

Tensor transposed(const Tensor& matrix) {
  require(matrix.shape().rank() == 2 && matrix.device().is_cpu(), "transposed: needs a 2-D host tensor, got ", matrix);
  const std::int64_t rows = matrix.shape()[0], cols = matrix.shape()[1];
  const Tensor out = Tensor::empty({cols, rows}, matrix.dtype());
  const auto element = static_cast<std::int64_t>(dtype_size(matrix.dtype()));
  const std::span<const std::uint8_t> from = matrix.as_bytes().span<std::uint8_t>();
  const std::span<std::uint8_t> to = out.as_bytes().span<std::uint8_t>();
  // Tiles of 32 x 32 elements keep both sides' lines in cache (a 768 x 3072 weight is 9 MB).
  constexpr std::int64_t tile = 32;
  for (std::int64_t r0 = 0; r0 < rows; r0 += tile) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += tile) {
      for (std::int64_t r = r0; r < std::min(rows, r0 + tile); ++r) {
        for (std::int64_t c = c0; c < std::min(cols, c0 + tile); ++c) {
          std::memcpy(&to[static_cast<std::size_t>((c * rows + r) * element)],
                      &from[static_cast<std::size_t>((r * cols + c) * element)], static_cast<std::size_t>(element));
        }
      }
    }
  }
  return out;
}

Tensor with_rows(const Tensor& matrix, std::int64_t rows) {
  require(matrix.shape().rank() == 2 && matrix.device().is_cpu() && rows >= 0, "with_rows: needs a 2-D host tensor and "
          "rows >= 0, got ", matrix, " and ", rows);
  const Tensor out = Tensor::zeros({rows, matrix.shape()[1]}, matrix.dtype());
  const std::int64_t kept = std::min(rows, matrix.shape()[0]);
  if (kept > 0) {
    const std::span<const std::uint8_t> from = matrix.slice(0, kept).as_bytes().span<std::uint8_t>();
    std::copy(from.begin(), from.end(), out.as_bytes().span<std::uint8_t>().begin());
  }
  return out;
}

}  // namespace loom::convert::detail
