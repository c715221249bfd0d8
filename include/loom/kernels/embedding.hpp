// Token + position embedding (GPT-2 style).
#pragma once

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/kernels/indices.hpp"

namespace loom::kernels {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. tokens: [B, T] i32 in [0, V); wte: [V, C];
// wpe: [maxT, C] with T <= maxT; out: [B, T, C]; wte, wpe, out one floating dtype.
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out,
                       StreamRef stream = {}, IndexCheck check = IndexCheck::checked);

// dwte[v] += sum of dout[b, t] over positions holding token v; dwpe[t] += sum over b of
// dout[b, t]. Deterministic: sums run in a fixed order, never with atomics. dwte, dwpe: f32 (a
// frequent token's many small contributions would vanish in a 16-bit accumulator). Tokens are
// trusted here (the forward pass checked them); on the GPU an out-of-range one is skipped.
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe,
                        StreamRef stream = {});

}  // namespace loom::kernels
