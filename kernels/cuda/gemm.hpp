// CUDA GEMM backends (host-compiler safe). Arguments are validated by loom::kernels::gemm.
#pragma once

#include <optional>

#include "kernels/cpu/gemm.hpp"  // GemmShape
#include "loom/kernels/gemm.hpp"

namespace loom::kernels::cuda {

// cuBLASLt: row-major D = op(A) op(B) computed as the column-major D^T = op(B)^T op(A)^T, with
// cuBLASLt's bias and GELU(-aux) epilogues; the bias gradient by loom's own reduction kernel.
void gemm_cublaslt(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
                   const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream);

// loom's own tensor-core GEMM (WMMA, sm_80+), for f16 and bf16 inputs; same semantics as
// gemm_cublaslt, epilogues included.
void gemm_loom(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
               const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream);

// bias_grad[i] = sum over batches and k of op(A)[i, k], in fp32, deterministic.
void gemm_bias_grad(const StridedMatrix& a, bool trans_a, const GemmShape& shape, const Tensor& bias_grad, void* stream);

}  // namespace loom::kernels::cuda
