// Fused causal attention on tensor cores (FlashAttention-2's algorithm on mma.sync), for the
// shapes training uses most: f16/bf16 storage, head size 64 or 128, 16-byte aligned tensors.
// fused_attention.cu routes those here and keeps its CUDA-core kernels for everything else.
// Host-compiler safe.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "loom/core/tensor.hpp"

namespace loom::kernels::cuda {

// Whether the tensor-core kernels take attention over qkv with `heads` heads; every tensor listed
// must start 16-byte aligned.
bool attention_mma_applies(const Tensor& qkv, std::int64_t heads, std::initializer_list<const Tensor*> tensors);

// out and lse (natural log) as fused_attention_forward defines them.
void attention_mma_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, std::int64_t heads,
                           void* stream);

// dqkv from dout, qkv, lse and delta ([B * NH * T] f32, delta = dO . O per row).
void attention_mma_backward(const Tensor& dout, const Tensor& qkv, const Tensor& lse, const float* delta,
                            const Tensor& dqkv, std::int64_t heads, void* stream);

}  // namespace loom::kernels::cuda
