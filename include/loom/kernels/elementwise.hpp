// Elementwise kernels of a transformer step. All tensors share one floating dtype (f32, f16,
// bf16) and one device; math is fp32. Outputs may alias inputs where noted.
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels {

// out = gelu_tanh(x). out may be x.
void gelu_forward(const Tensor& x, const Tensor& out, StreamRef stream = {});

// dx = dout * gelu_tanh'(x). dx may be dout.
void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx, StreamRef stream = {});

// out = a + b. out may be a or b.
void residual_add(const Tensor& a, const Tensor& b, const Tensor& out, StreamRef stream = {});

}  // namespace loom::kernels
