#include "loom/core/cuda_check.hpp"

#include "loom/core/error.hpp"

namespace loom {

void check(cudaError_t status, std::string_view call) {
  if (status == cudaSuccess) return;
  fail(ErrorCategory::cuda, call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

void check(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(ErrorCategory::cuda, call, " failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
}

}  // namespace loom
