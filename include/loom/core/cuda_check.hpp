// Checked wrappers for CUDA runtime and cuBLAS/cuBLASLt return codes (builds with LOOM_WITH_CUDA).
// check(status, "cudaMalloc(4096 bytes) on cuda:0") throws a cuda Error that names the call, the
// status name and its description.
#pragma once

#include <string_view>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace loom {

void check(cudaError_t status, std::string_view call);
void check(cublasStatus_t status, std::string_view call);

}  // namespace loom
