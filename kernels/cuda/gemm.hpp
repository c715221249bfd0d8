// CUDA GEMM backends (host-compiler safe). Arguments are validated by loom::kernels::gemm.
#pragma once

#include <optional>

#include "kernels/cpu/gemm.hpp"  // GemmShape
#include "loom/kernels/gemm.hpp"

namespace loom::kernels::cuda {

// cuBLASLt: row-major D = op(A) op(B) computed as the column-major D^T = op(B)^T op(A)^T, with
// cuBLASLt's bias and GELU(-aux) epilogues; the bias gradient by loom's own reduction kernel (also
// for an empty D: N = 0 still has row sums). A bias in another dtype than D's (16-bit with an f32 D)
// or not 16-byte aligned is staged into aligned scratch first; where cuBLASLt cannot keep the
// pre-activation (its leading dimension must be a multiple of 8, its pointer 16-byte aligned), the
// GEMM writes the pre-activation and loom applies GELU. K = 0 runs loom's epilogue alone.
void gemm_cublaslt(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
                   const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream);

// loom's own tensor-core GEMM (sm_80+) for f16, bf16 and tf32 precision; same semantics as
// gemm_cublaslt, epilogues included. Operands with 16-byte aligned rows (16-bit) or any f32 operands
// (tf32) run the cp.async-pipelined mma.sync kernel (gemm_mma.cu); other 16-bit layouts, and 16-bit
// GEMMs on GPUs with less shared memory per block than it needs (sm_86/sm_89), run the general WMMA
// kernel (gemm_wmma.cu); tf32 there is an invalid_argument Error.
void gemm_loom(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
               const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream);

// The WMMA kernel alone (f16/bf16, any layout), without the bias gradient.
void gemm_wmma(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
               const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream);

// D = gelu(pre_activation) element by element, pre_activation contiguous [batch, M, N], D strided.
void gemm_gelu_from_pre_activation(const Tensor& pre_activation, const StridedMatrix& d, const GemmShape& shape,
                                   void* stream);

// D = epilogue(beta C) for a GEMM with K = 0 (what loom's kernels give: beta C + bias, GELU with the
// pre-activation kept), without the bias gradient.
void gemm_empty_k(const std::optional<StridedMatrix>& c, const StridedMatrix& d, const GemmOptions& options,
                  const GemmShape& shape, void* stream);

// bias_grad[i] = sum over batches and k of op(A)[i, k], in fp32, deterministic.
void gemm_bias_grad(const StridedMatrix& a, bool trans_a, const GemmShape& shape, const Tensor& bias_grad, void* stream);

}  // namespace loom::kernels::cuda
