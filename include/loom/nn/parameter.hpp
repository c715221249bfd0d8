// nn's name for the model-level parameter description (loom/model/parameter.hpp).
#pragma once

#include "loom/model/parameter.hpp"

namespace loom::nn {
using model::Parameter;
}  // namespace loom::nn
