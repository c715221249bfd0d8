// A batch of row-major matrices inside a tensor, with explicit leading dimension and batch
// stride: what GEMMs read and write. Element (b, r, c) is at data[b * batch_stride + r * ld + c].
#pragma once

#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::kernels {

struct StridedMatrix {
  Tensor tensor;                 // holds the storage; element 0 is tensor.raw_data()
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;           // elements between consecutive rows, >= cols
  std::int64_t batch = 1;
  std::int64_t batch_stride = 0; // elements between consecutive matrices; 0 broadcasts one matrix

  // The natural view of a contiguous tensor of shape [rows, cols] or [batch, rows, cols].
  static StridedMatrix of(const Tensor& tensor);

  // Throws an invalid_argument Error naming `name` unless the layout is consistent and every
  // element it addresses lies inside the tensor.
  void validate(const char* name) const;
};

}  // namespace loom::kernels
