// CPU implementations of the training kernels. Arguments are validated by the public entry
// points in src/kernels; these only compute.
#pragma once

#include "loom/kernels/cast.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/embedding.hpp"
#include "loom/kernels/layernorm.hpp"
#include "loom/kernels/softmax.hpp"

namespace loom::kernels::cpu {

void gelu_forward(const Tensor& x, const Tensor& out);
void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx);
void residual_add(const Tensor& a, const Tensor& b, const Tensor& out);
void cast(const Tensor& src, const Tensor& dst, const CastOptions& options);
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps);
// residual: undefined, or added to dx (kernels::layernorm_backward_residual).
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dweight,
                        const Tensor& dbias);
void softmax_forward(const Tensor& x, const Tensor& out, bool causal);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                           std::int64_t vocab_size, std::int64_t ignore_index);
void accumulate_mean(const Tensor& values, double divisor, const Tensor& out);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses, const Tensor& dlogits,
                            std::int64_t vocab_size, std::int64_t ignore_index);
// Causal attention for f32 qkv in fp32 precision (shapes checked by loom::kernels): only what the
// mask leaves is computed; results match the composed path of src/kernels/attention.cpp.
void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& att, std::int64_t heads);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        std::int64_t heads);
// Fused causal attention (any floating dtype, fp32 arithmetic; shapes checked by loom::kernels):
// no T x T matrix, lse [B, NH, T] f32 keeps each row's log-sum-exp for backward.
void fused_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, std::int64_t heads);
void fused_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, std::int64_t heads);
// x [B, T, K * NH * hs] <-> heads [K, B, NH, T, hs] (to_heads: x is read).
void permute_heads(const Tensor& x, const Tensor& heads, std::int64_t num_heads, bool to_heads);
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe);

}  // namespace loom::kernels::cpu
