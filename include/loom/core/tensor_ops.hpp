// Whole-tensor operations every layer needs: copies between devices and fills.
// With the default StreamRef they finish before returning; with a CUDA stream they are
// enqueued on it and the caller synchronizes.
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

// dst <- src elementwise. Same dtype and numel (shapes may differ, as in a reshape); any pair of
// devices (CPU and CUDA, either way, or CUDA to CUDA).
void copy(const Tensor& dst, const Tensor& src, StreamRef stream = {});

// Every element of dst <- value, converted to dst's dtype: floating dtypes round the double to
// nearest even once (no double rounding through float), overflowing to infinity.
// For integer dtypes value must be a whole number in the dtype's range.
void fill(const Tensor& dst, double value, StreamRef stream = {});

}  // namespace loom
