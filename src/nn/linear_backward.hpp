// The weight, bias and input gradients of y = x W^T + b, shared by nn::Linear and the
// tensor-parallel RowParallelLinear (whose block of W is an ordinary Linear's weight here).
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/nn/precision.hpp"

namespace loom::nn::detail {

// dW += dy^T x with the bias gradient (the sum of dy over rows) from the same GEMM, each marked
// ready; then dx = dy W into dx_buffer ([rows, in], reused). grad_out: [rows, out]; input: the
// forward's x as [rows, in]. Returns dx.
Tensor linear_backward(const Tensor& grad_out, const Tensor& input, Parameter& weight, Parameter* bias,
                       Tensor& bias_grad_scratch, Tensor& dx_buffer, const Precision& precision, StreamRef stream);

}  // namespace loom::nn::detail
