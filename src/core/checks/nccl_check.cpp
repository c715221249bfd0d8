#include "loom/core/nccl_check.hpp"

#include <cstring>

#include "loom/core/error.hpp"

namespace loom {

void check(ncclResult_t status, std::string_view call) {
  // ncclInProgress is not success: only the calls that poll for it (comm/nccl.cpp's settle)
  // accept it, before they get here.
  if (status == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  const bool has_last = last != nullptr && std::strlen(last) > 0;
  fail(ErrorCategory::nccl, call, " failed: ", ncclGetErrorString(status), " (ncclResult ", static_cast<int>(status),
       ")", has_last ? ": " : "", has_last ? last : "");
}

}  // namespace loom
