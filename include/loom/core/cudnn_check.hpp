// Checked wrapper for cuDNN return codes (builds with LOOM_WITH_CUDNN).
#pragma once

#include <string_view>

#include <cudnn.h>

namespace loom {

void check(cudnnStatus_t status, std::string_view call);

}  // namespace loom
