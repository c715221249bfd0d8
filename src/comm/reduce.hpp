// Element-wise reductions over the ranks' buffers for the CPU backends, and to_string(ReduceOp).
// f16/bf16 accumulate in fp32, f32 in fp32, integers in int64; ranks are combined in rank order,
// so every rank computes bit-identical results.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::comm::detail {

// f16/bf16 elements as f32, and back (round to nearest even), for backends that reduce in f32.
std::vector<float> widen_to_f32(const Tensor& tensor);
void narrow_from_f32(const float* values, const Tensor& tensor);
// The same on n elements of raw memory.
void widen_to_f32(const void* in, DType dtype, std::int64_t n, float* out);
void narrow_from_f32(const float* values, void* out, DType dtype, std::int64_t n);

// out[i] = op over r of inputs[r][offset + i], i < count, in dtype.
void reduce_into(void* out, const std::vector<const void*>& inputs, std::int64_t offset, std::int64_t count,
                 DType dtype, ReduceOp op);

}  // namespace loom::comm::detail
