// The checked wrappers for vendor return codes. They need the vendor libraries, not a device:
// error names and descriptions come from the libraries themselves.
#include <catch2/catch.hpp>

#include <string>

#include "loom/config.hpp"
#include "support/tensor_checks.hpp"

#if LOOM_WITH_CUDA
#include "loom/core/cuda_check.hpp"
#endif
#if LOOM_WITH_NCCL
#include "loom/core/nccl_check.hpp"
#endif
#if LOOM_WITH_CUDNN
#include "loom/core/cudnn_check.hpp"
#endif
#if LOOM_WITH_MPI
#include <mpi.h>

#include "loom/core/mpi_check.hpp"
#endif

using loom::ErrorCategory;
using loom::test::IsError;

#if LOOM_WITH_CUDA
TEST_CASE("CUDA and cuBLAS failures name the call and the status", "[checks][cuda]") {
  CHECK_NOTHROW(loom::check(cudaSuccess, "cudaMalloc"));
  CHECK_THROWS_MATCHES(loom::check(cudaErrorMemoryAllocation, "cudaMalloc(4096 bytes) on cuda:1"), loom::Error,
                       IsError(ErrorCategory::cuda, {"cudaMalloc(4096 bytes) on cuda:1", "cudaErrorMemoryAllocation",
                                                     "out of memory"}));
  CHECK_NOTHROW(loom::check(CUBLAS_STATUS_SUCCESS, "cublasLtMatmul"));
  CHECK_THROWS_MATCHES(loom::check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul(bf16 64x64x64)"), loom::Error,
                       IsError(ErrorCategory::cuda, {"cublasLtMatmul(bf16 64x64x64)", "CUBLAS_STATUS_NOT_SUPPORTED"}));
}
#endif

#if LOOM_WITH_NCCL
TEST_CASE("NCCL failures name the call and NCCL's description", "[checks][nccl]") {
  CHECK_NOTHROW(loom::check(ncclSuccess, "ncclAllReduce"));
  // A non-blocking call still in progress is not success: only the code that polls for it accepts it.
  CHECK_THROWS_MATCHES(loom::check(ncclInProgress, "ncclAllReduce"), loom::Error,
                       IsError(ErrorCategory::nccl, {"ncclAllReduce", "failed"}));
  CHECK_THROWS_MATCHES(loom::check(ncclInvalidArgument, "ncclAllReduce(count=7)"), loom::Error,
                       IsError(ErrorCategory::nccl, {"ncclAllReduce(count=7)", "invalid argument"}));
  CHECK_THROWS_MATCHES(loom::check(ncclRemoteError, "ncclGroupEnd"), loom::Error,
                       IsError(ErrorCategory::nccl, {"ncclGroupEnd", "remote process"}));
}
#endif

#if LOOM_WITH_CUDNN
TEST_CASE("cuDNN failures name the call and the status", "[checks][cudnn]") {
  CHECK_NOTHROW(loom::check(CUDNN_STATUS_SUCCESS, "cudnnCreate"));
  CHECK_THROWS_MATCHES(loom::check(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize(sdpa)"), loom::Error,
                       IsError(ErrorCategory::cuda, {"cudnnBackendFinalize(sdpa)", "CUDNN_STATUS_BAD_PARAM"}));
}
#endif

#if LOOM_WITH_MPI
TEST_CASE("MPI failures name the call and MPI's description", "[checks][mpi]") {
  CHECK_NOTHROW(loom::check_mpi(MPI_SUCCESS, "MPI_Send"));
  // Outside MPI_Init..MPI_Finalize the wrapper must not ask MPI for a description (Open MPI 4
  // aborts the process); tests/dist checks the description inside an MPI job.
  const std::string code = "MPI error " + std::to_string(MPI_ERR_COUNT);
  CHECK_THROWS_MATCHES(loom::check_mpi(MPI_ERR_COUNT, "MPI_Send(count=-1)"), loom::Error,
                       IsError(ErrorCategory::mpi, {"MPI_Send(count=-1)", code, "not initialized"}));
}
#endif

TEST_CASE("the build reports what it contains", "[checks]") {
  SUCCEED("CUDA=" << LOOM_WITH_CUDA << " NCCL=" << LOOM_WITH_NCCL << " cuDNN=" << LOOM_WITH_CUDNN
                  << " MPI=" << LOOM_WITH_MPI);
  CHECK((LOOM_WITH_NCCL == 0 || LOOM_WITH_CUDA == 1));  // NCCL is only built with CUDA
  CHECK((LOOM_WITH_CUDNN == 0 || LOOM_WITH_CUDA == 1));
}
