#include "loom/core/cudnn_check.hpp"

#include "loom/core/error.hpp"

namespace loom {

void check(cudnnStatus_t status, std::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last_error[512] = {};
  cudnnGetLastErrorString(last_error, sizeof(last_error));
  fail(ErrorCategory::cuda, call, " failed: ", cudnnGetErrorString(status), " (status ", static_cast<int>(status),
       ")", last_error[0] != '\0' ? ": " : "", last_error);
}

}  // namespace loom
