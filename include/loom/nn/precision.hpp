// nn's name for the model-level precision policy (loom/model/precision.hpp).
#pragma once

#include "loom/model/precision.hpp"

namespace loom::nn {
using model::Precision;
}  // namespace loom::nn
