// Checked wrapper for NCCL return codes (builds with LOOM_WITH_NCCL). The Error carries NCCL's
// own description of the last failure when NCCL has one. Only ncclSuccess passes: a
// non-blocking call's ncclInProgress is handled where the call is polled.
#pragma once

#include <string_view>

#include <nccl.h>

namespace loom {

void check(ncclResult_t status, std::string_view call);

}  // namespace loom
