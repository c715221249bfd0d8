// CUDA implementations of the training kernels, enqueued on `stream` (a cudaStream_t; null for
// the legacy default stream). Arguments are validated by the entry points in src/kernels.
// Host-compiler safe: no CUDA headers.
#pragma once

#include "loom/kernels/cast.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/embedding.hpp"
#include "loom/kernels/grad_utils.hpp"
#include "loom/kernels/layernorm.hpp"
#include "loom/kernels/optimizer.hpp"
#include "loom/kernels/softmax.hpp"

namespace loom::kernels::cuda {

void gelu_forward(const Tensor& x, const Tensor& out, void* stream);
void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx, void* stream);
void residual_add(const Tensor& a, const Tensor& b, const Tensor& out, void* stream);
void cast(const Tensor& src, const Tensor& dst, const CastOptions& options, void* stream);

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps, void* stream);
void residual_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum, const Tensor& weight,
                                const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd, float eps,
                                void* stream);
void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias, void* stream);

void softmax_forward(const Tensor& x, const Tensor& out, bool causal, void* stream);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, void* stream);
// Fused causal attention (see loom/kernels/attention.hpp): head_size <= 128.
void fused_attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, std::int64_t heads,
                             void* stream);
void fused_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, std::int64_t heads, void* stream);
// x [B, T, K * NH * hs] <-> heads [K, B, NH, T, hs] (to_heads: x is read).
void permute_heads(const Tensor& x, const Tensor& heads, std::int64_t num_heads, bool to_heads, void* stream);
void accumulate_mean(const Tensor& values, double divisor, const Tensor& out, void* stream);
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses, std::int64_t vocab_size,
                           std::int64_t ignore_index, void* stream);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses, const Tensor& dlogits,
                            std::int64_t vocab_size, std::int64_t ignore_index, void* stream);

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out, void* stream);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe, void* stream);

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hp, void* stream);
void sgd_step(std::span<const SgdTensor> tensors, const SgdHyperparameters& hp, void* stream);
void unscale_and_check_finite(std::span<const Tensor> grads, float scale, const Tensor& found_nonfinite, void* stream);
// out[0] = sum of squares (sqrt_result: its square root), reduced deterministically.
void sum_of_squares(std::span<const Tensor> tensors, const Tensor& out, bool sqrt_result, void* stream);

}  // namespace loom::kernels::cuda
