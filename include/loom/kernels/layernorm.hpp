// LayerNorm over the last dimension, statistics in fp32.
//   mean = avg(x), rstd = 1 / sqrt(var(x) + eps), out = (x - mean) * rstd * weight + bias
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels {

// x, out: [..., C]; weight, bias: [C] (all one floating dtype); mean, rstd: [rows] f32, written
// for the backward pass (rows = numel / C).
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps = 1e-5f, StreamRef stream = {});

// The residual add and the LayerNorm after it in one pass: sum = a + b (rounded to the dtype),
// then layernorm_forward(sum, ...). The same bits as those two calls on the same device; on a GPU
// the sum is read back from registers instead of memory. a, b, sum: [..., C], one dtype; sum must
// not share storage with a or b.
void residual_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum, const Tensor& weight,
                                const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                float eps = 1e-5f, StreamRef stream = {});

// dx is written (it must not share storage with dout or x); dweight and dbias are accumulated into
// (+=), as parameter gradients are over micro-batches, summed in fp32 and rounded once.
// dweight/dbias share one dtype: f32 or x's.
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                        StreamRef stream = {});

// layernorm_backward with the gradient that reaches the LayerNorm's input along a residual branch
// added: dx = residual + LayerNorm's input gradient. The same bits as layernorm_backward then
// residual_add(residual, dx, dx) on the same device; on the CPU the sum is made while dx is
// written, saving a pass over three tensors. residual: like x, one dtype with it; it must not
// share storage with dx, dweight or dbias.
void layernorm_backward_residual(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias, StreamRef stream = {});

}  // namespace loom::kernels
