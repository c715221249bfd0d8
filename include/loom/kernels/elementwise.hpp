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

// dx = dout * gelu_tanh'(x) given y = gelu_forward(x), bit for bit (or the output of a GEMM's GELU
// epilogue, which is the same): the sigmoid is read off as y / x instead of recomputed, one division
// in place of an exponential and a division (on a 1024 x 512 activation, 0.54x gelu_backward's time
// with AVX2 and 0.85x with AVX-512 on a 2-core Xeon). The sigmoid is then within two roundings of the exact 1 / (1 + e^t) (gelu_backward's: one),
// so the results may differ from gelu_backward's in the last bits; they are the same on every CPU
// variant and thread count. f32 only: y in f16 or bf16 keeps too little of the sigmoid. CPU only:
// on a GPU, where this kernel is bound by memory, reading y costs more than the exponential saves.
// dx may be dout.
void gelu_backward_from_output(const Tensor& x, const Tensor& y, const Tensor& dout, const Tensor& dx,
                               StreamRef stream = {});

// out = a + b. out may be a or b.
void residual_add(const Tensor& a, const Tensor& b, const Tensor& out, StreamRef stream = {});

}  // namespace loom::kernels
