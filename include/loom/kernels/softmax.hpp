// Softmax over the last dimension, in fp32 with the maximum subtracted.
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels {

// out = softmax(x) row by row; x, out: [..., N], one floating dtype. out may be x.
// causal: x is [..., T, T] (N == T) and row t of each T x T block keeps columns 0..t only; the
// masked columns of out are 0 (the attention mask of a decoder).
void softmax_forward(const Tensor& x, const Tensor& out, StreamRef stream = {}, bool causal = false);

// dx = y * (dy - sum(dy * y)) row by row, from the softmax output y. dx may be dy.
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, StreamRef stream = {});

}  // namespace loom::kernels
