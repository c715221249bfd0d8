// One interface for collective communication among the ranks of a job. Every call is
// asynchronous and returns a Work; a backend finishes its calls in the order they were made.
// Tensors are contiguous; outputs may be the inputs (in place) where noted.
#pragma once

#include <chrono>
#include <string_view>

#include "loom/comm/work.hpp"
#include "loom/core/tensor.hpp"

namespace loom::comm {

enum class ReduceOp { sum, avg, max, min };
std::string_view to_string(ReduceOp op) noexcept;

struct CommOptions {
  // A collective that not every rank joins within this time fails with a timeout Error on the
  // ranks that did, and the communicator is aborted (later calls fail at once) instead of hanging.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // output = op over ranks of input, element-wise (f16/bf16 accumulate in fp32). output may be input.
  virtual Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  // tensor = root's tensor on every rank.
  virtual Work broadcast(const Tensor& tensor, int root) = 0;
  // output (size x input.numel elements) = the inputs in rank order.
  virtual Work all_gather(const Tensor& input, const Tensor& output) = 0;
  // output (input.numel / size elements) = this rank's block of op over ranks of input.
  virtual Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  virtual Work barrier() = 0;
};

}  // namespace loom::comm
