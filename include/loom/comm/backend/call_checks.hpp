// What every backend checks before it queues a call, and how it names the call in messages. The
// checks throw invalid_argument Errors naming the call (`what`), the argument and the tensor.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/comm/communicator.hpp"

namespace loom::comm::backend {

// "<label> <op> (rank R of N[ on cuda:D][, peer P])"; the device is named when it is a GPU.
std::string describe_call(std::string_view label, std::string_view op, int rank, int size, Device device,
                          int peer = -1);

// A defined tensor on the communicator's device.
void require_on_device(const std::string& what, const char* name, const Tensor& tensor, Device device);
void require_same_dtype(const std::string& what, const Tensor& input, const Tensor& output);
void require_root(const std::string& what, int root, int size);
void require_color(const std::string& what, int color);
// A split's own timeout, when given, is positive.
void require_split_timeout(const std::string& what, std::optional<std::chrono::milliseconds> timeout);
// A tensor on device and a peer in [0, size) other than this rank.
void require_peer(const std::string& what, const Tensor& tensor, int peer, int rank, int size, Device device);
// output holds `ranks` x input's elements, same dtype, both on device.
void require_gatherable(const std::string& what, const Tensor& input, const Tensor& output, int ranks, Device device);
// input and output on device, one reducible dtype (f32, f16, bf16, i32, i64); input.numel ==
// blocks x output.numel; avg only for floating dtypes.
void require_reducible(const std::string& what, const Tensor& input, const Tensor& output, ReduceOp op,
                       std::int64_t blocks, Device device);

// "not completed within T ms (a peer did not join, or is stuck)": why a backend aborted.
std::string not_completed_within(std::chrono::milliseconds timeout);

}  // namespace loom::comm::backend
