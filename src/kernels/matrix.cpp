#include "loom/kernels/matrix.hpp"

#include <algorithm>

#include "loom/core/error.hpp"

namespace loom::kernels {

StridedMatrix StridedMatrix::of(const Tensor& tensor) {
  require(tensor.defined(), "a GEMM operand is an undefined tensor");
  require(tensor.rank() == 2 || tensor.rank() == 3, "a GEMM operand must be [rows, cols] or [batch, rows, cols], got ",
          tensor);
  StridedMatrix m;
  m.tensor = tensor;
  m.rows = tensor.size(-2);
  m.cols = tensor.size(-1);
  m.ld = std::max<std::int64_t>(m.cols, 1);  // an empty row still has a valid leading dimension
  m.batch = tensor.rank() == 3 ? tensor.size(0) : 1;
  m.batch_stride = m.rows * m.cols;
  return m;
}

void StridedMatrix::validate(const char* name) const {
  require(tensor.defined(), "GEMM operand ", name, " has no tensor");
  require(rows >= 0 && cols >= 0, "GEMM operand ", name, " has a negative extent: ", rows, " x ", cols);
  require(ld >= cols && ld >= 1, "GEMM operand ", name, " has leading dimension ", ld, " < its ", cols, " columns");
  require(batch >= 1 && batch_stride >= 0, "GEMM operand ", name, " has batch ", batch, " and batch stride ",
          batch_stride);
  if (rows == 0 || cols == 0) return;
  // Index of the last element addressed, computed without overflow.
  std::int64_t last = 0, span = 0;
  const bool overflow = __builtin_mul_overflow(batch - 1, batch_stride, &last) ||
                        __builtin_mul_overflow(rows - 1, ld, &span) || __builtin_add_overflow(last, span, &last) ||
                        __builtin_add_overflow(last, cols - 1, &last);
  require(!overflow && last < tensor.numel(), "GEMM operand ", name, " (", batch, " x ", rows, " x ", cols, ", ld ", ld,
          ", batch stride ", batch_stride, ") reaches past the end of ", tensor);
}

}  // namespace loom::kernels
