// Causal multi-head self-attention.
//
//   qkv [B, T, 3C] = [q | k | v], heads of size hs = C / num_heads side by side in each third
//   att [B, NH, T, T] = softmax(q k^T / sqrt(hs)) with the causal mask, kept for backward
//   out [B, T, C]     = att v, heads side by side
//
// attention_forward/backward store att. Three implementations, on the same operations:
// - composed: per sequence, GEMMs batched over its heads on strided views of qkv, and a causal
//   softmax; every device and dtype (the reference);
// - head_major: the heads are first copied to [3, B, NH, T, hs] (split_heads), so that each of the
//   GEMMs is one call batched over all B * NH heads, and the result copied back (merge_heads); its
//   working memory (two such copies in backward, plus [B, NH, T, T]) comes from
//   shared_scratch_allocator, so a training step allocates nothing after warm-up;
// - on the CPU, for f32 in fp32 precision, a causal path that computes only what the mask leaves
//   (half the score and probability products).
// automatic picks the causal path where it applies, head_major on CUDA (one GEMM launch instead of
// B, which otherwise bounds short GEMMs by the host), composed elsewhere.
//
// fused_attention_forward/backward never store att: forward keeps each query row's log-sum-exp
//   lse [B, NH, T] (f32) = log sum_j exp(q_t k_j / sqrt(hs)) over the visible j
// and backward recomputes the probabilities from it (FlashAttention-2's recurrence), so memory is
// O(T), not O(T^2). Results are deterministic (no atomics). Arithmetic is fp32 for every storage
// dtype (agreeing with the composed path to fp32 rounding), except that on CUDA f16/bf16 with head
// size 64 or 128 run on tensor cores, where the probabilities and score gradients are rounded to
// the storage dtype before their products, as FlashAttention does. On CUDA head_size must be <= 128.
#pragma once

#include <cstdint>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/kernels/gemm.hpp"

namespace loom::kernels {

enum class AttentionPath { automatic, composed, head_major };

struct AttentionOptions {
  std::int64_t num_heads = 1;
  GemmPrecision precision = GemmPrecision::fp32;  // must suit qkv's dtype (fp32/tf32: f32; bf16; fp16)
  AttentionPath path = AttentionPath::automatic;
};

// qkv, out and att share qkv's dtype. out may be undefined: then only att is computed (the same
// bits), which is what selective activation checkpointing recomputes.
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& att, const AttentionOptions& options,
                       StreamRef stream = {});

// dqkv [B, T, 3C] is written. scratch ([NH, T, T], qkv's dtype) is optional working memory for the
// composed path; it comes from shared_scratch_allocator when undefined (the other paths ignore it).
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        const AttentionOptions& options, StreamRef stream = {}, const Tensor& scratch = {});

// out and lse as above (out in qkv's dtype). options.path is not used.
void fused_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                             StreamRef stream = {});

// dqkv [B, T, 3C] is written from dout, the forward's qkv, out and lse.
void fused_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, const AttentionOptions& options, StreamRef stream = {});

// Head layouts. x is [B, T, K * C] with K groups of NH heads of hs = C / NH columns side by side
// (qkv: K = 3, out: K = 1); heads is [K, B, NH, T, hs], each head's T x hs matrix contiguous.
// split_heads copies x into heads, merge_heads heads into x; any dtype, the bits are moved unchanged.
void split_heads(const Tensor& x, const Tensor& heads, std::int64_t num_heads, StreamRef stream = {});
void merge_heads(const Tensor& heads, const Tensor& x, std::int64_t num_heads, StreamRef stream = {});

}  // namespace loom::kernels
