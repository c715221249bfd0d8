// The waiting form of a loss's forward_into (nn/loss.hpp, nn/vocab_parallel.hpp): the loss added
// to a zeroed [1] buffer on the input's device, then read back.
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
#include "src/nn/buffer.hpp"

namespace loom::nn::detail {

template <class Loss>
float loss_value(Loss& loss, Tensor& value, const Tensor& input, const Tensor& targets, StreamRef stream) {
  ensure_buffer(value, {1}, DType::f32, input.device());
  fill(value, 0.0, stream);
  loss.forward_into(input, targets, value, stream);
  synchronize(stream);
  return value.to(Device::cpu()).item<float>();
}

}  // namespace loom::nn::detail
