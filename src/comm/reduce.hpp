// Element-wise reductions over the ranks' buffers for the CPU backends, and the argument checks
// they share; also to_string(ReduceOp). f16/bf16 accumulate in fp32, f32 in fp32, integers in int64; ranks are combined in
// rank order, so every rank computes bit-identical results.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::comm::detail {

void require_cpu_contiguous(const std::string& what, const char* name, const Tensor& tensor);
// Checks that hold on every backend (device checks are the backend's): defined tensors, one dtype.
void require_same_dtype(const std::string& what, const Tensor& input, const Tensor& output);
// output holds `ranks` x input's elements, same dtype, both on the CPU.
void require_gatherable(const std::string& what, const Tensor& input, const Tensor& output, int ranks);
// A CPU tensor and a peer in [0, size) other than this rank.
void require_peer(const std::string& what, const Tensor& tensor, int peer, int rank, int size);
// input and output: CPU, one supported dtype; input.numel == blocks x output.numel; avg only for
// floating dtypes.
void require_reducible(const std::string& what, const Tensor& input, const Tensor& output, ReduceOp op,
                       std::int64_t blocks);

// f16/bf16 elements as f32, and back (round to nearest even), for backends that reduce in f32.
std::vector<float> widen_to_f32(const Tensor& tensor);
void narrow_from_f32(const float* values, const Tensor& tensor);

// "not completed within T ms (a peer did not join, or is stuck)": why a backend aborted.
std::string not_completed_within(std::chrono::milliseconds timeout);

// out[i] = op over r of inputs[r][offset + i], i < count, in dtype.
void reduce_into(void* out, const std::vector<const void*>& inputs, std::int64_t offset, std::int64_t count,
                 DType dtype, ReduceOp op);

}  // namespace loom::comm::detail
