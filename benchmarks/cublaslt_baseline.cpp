#include "cublaslt_baseline.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <vector>

#include "bench_report.hpp"
#include "loom/core/cuda_check.hpp"
#include "loom/core/error.hpp"

namespace loom::bench {

namespace {
cudaDataType_t type_of(DType dtype) {
  return dtype == DType::bf16 ? CUDA_R_16BF : dtype == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}
}  // namespace

double time_cublaslt(const Tensor& a, const Tensor& b, const Tensor& c, bool tf32, int repeats, bool trans_a,
                     bool trans_b) {
  const std::int64_t m = c.size(0), n = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  check(cudaSetDevice(a.device().index()), "cudaSetDevice");
  cublasLtHandle_t handle = nullptr;
  check(cublasLtCreate(&handle), "cublasLtCreate");
  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's A is our B's
  // memory (column-major n x k, or k x n transposed), its B is our A's (k x m, or m x k transposed).
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "TRANSB");
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  check(trans_b ? cublasLtMatrixLayoutCreate(&la, type_of(b.dtype()), u(k), u(n), k)
                : cublasLtMatrixLayoutCreate(&la, type_of(b.dtype()), u(n), u(k), n),
        "layout");
  check(trans_a ? cublasLtMatrixLayoutCreate(&lb, type_of(a.dtype()), u(m), u(k), m)
                : cublasLtMatrixLayoutCreate(&lb, type_of(a.dtype()), u(k), u(m), k),
        "layout");
  check(cublasLtMatrixLayoutCreate(&lc, type_of(c.dtype()), static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(m), n),
        "layout");
  const std::size_t workspace_bytes = std::size_t{32} << 20;
  void* workspace = nullptr;
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc(workspace)");
  cublasLtMatmulPreference_t preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof(workspace_bytes)),
        "preference");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, preference, 1, &heuristic, &found), "heuristic");
  if (found == 0) fail(ErrorCategory::cuda, "cuBLASLt baseline: no algorithm for ", m, "x", n, "x", k);

  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t start = nullptr, end = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    check(cublasLtMatmul(handle, desc, &alpha, b.raw_data(), la, a.raw_data(), lb, &beta, c.raw_data(), lc,
                         c.raw_data(), lc, &heuristic.algo, workspace, workspace_bytes, stream),
          "cublasLtMatmul");
  };
  run();
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    check(cudaEventRecord(end, stream), "cudaEventRecord");
    check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
    samples.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
  cublasLtMatmulPreferenceDestroy(preference);
  cudaFree(workspace);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  return median(samples);
}

}  // namespace loom::bench
