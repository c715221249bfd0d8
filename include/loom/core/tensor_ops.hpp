// Whole-tensor operations every layer needs: copies between devices, fills, and element values
// to and from double.
// With the default StreamRef they finish before returning; with a CUDA stream they are
// enqueued on it and the caller synchronizes.
#pragma once

#include <span>
#include <vector>

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

// A 1-D tensor of dtype on device holding values, each converted as fill converts it (exact for
// values the dtype represents; integers must be whole and in range).
Tensor from_doubles(std::span<const double> values, DType dtype, Device device = Device::cpu());

// The elements of a tensor on any device, as double (exact for every dtype but i64 beyond 2^53).
std::vector<double> to_doubles(const Tensor& tensor);

}  // namespace loom
