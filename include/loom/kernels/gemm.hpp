// GEMM: D = epilogue(alpha * op(A) op(B) + beta * C), batched, row-major, any leading dimension.
//
//   op(A): [M, K]   A is [M, K], or [K, M] with trans_a
//   op(B): [K, N]   B is [K, N], or [N, K] with trans_b
//   C, D:  [M, N]   D may be C itself (in place); C is read only when beta != 0
//
// Precision is the arithmetic, as on tensor cores: fp32 (exact fp32 products), tf32 (f32
// inputs rounded to TF32), fp16 / bf16 (f16 / bf16 inputs); products are always accumulated in
// fp32. D's dtype may differ from the inputs' (f32, or the input dtype). On the CPU the inputs
// are rounded exactly as tensor cores round them, so the CPU result is the reference for the GPU.
#pragma once

#include <optional>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/kernels/matrix.hpp"

namespace loom::kernels {

enum class GemmPrecision { fp32, tf32, fp16, bf16 };
// CUDA only: loom = loom's own tensor-core kernels (tf32, fp16, bf16: a cp.async-pipelined
// mma.sync kernel, or a general WMMA kernel for 16-bit operands whose rows are not 16-byte
// aligned); cublaslt = cuBLASLt; automatic = the measured rule (docs/ARCHITECTURE.md).
enum class GemmBackend { automatic, loom, cublaslt };
enum class Activation { none, gelu };

struct GemmEpilogue {
  Tensor bias;                    // [N], added to every row (f32 or the input dtype); optional
  Activation activation = Activation::none;
  Tensor pre_activation;          // [batch, M, N] like D: receives the value before GELU; optional
  // With a 16-bit D the CPU applies GELU to the pre-activation rounded to D's dtype (so gelu_forward
  // of the stored pre-activation gives D's bits); CUDA's epilogues may apply it before rounding
  // (cuBLASLt's GELU_AUX), one rounding apart.
  // Backward helper: bias_grad[i] = sum_k op(A)[i, k] over every batch ([M], f32); for
  // dW = dY^T X this is the bias gradient, sum over rows of dY. Optional.
  Tensor bias_grad;
};

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  GemmPrecision precision = GemmPrecision::fp32;
  GemmEpilogue epilogue{};
  GemmBackend backend = GemmBackend::automatic;  // CUDA only; the CPU has one implementation
};

std::string_view to_string(GemmPrecision precision) noexcept;
// The input dtype a precision multiplies: f32 for fp32/tf32, f16 for fp16, bf16 for bf16.
DType input_dtype(GemmPrecision precision) noexcept;
GemmPrecision parse_gemm_precision(std::string_view text);

// The general form: D = epilogue(alpha op(A) op(B) + beta C). c may be std::nullopt when beta is
// 0. Throws invalid_argument for inconsistent shapes, dtypes, devices or layouts.
void gemm(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
          const StridedMatrix& d, const GemmOptions& options, StreamRef stream = {});

// Contiguous tensors of rank 2 ([M, K]...) or 3 ([batch, M, K]...); d is also C.
void gemm(const Tensor& a, const Tensor& b, const Tensor& d, const GemmOptions& options = {},
          StreamRef stream = {});

}  // namespace loom::kernels
