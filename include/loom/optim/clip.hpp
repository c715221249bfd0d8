// Gradient clipping by global L2 norm.
#pragma once

#include <vector>

#include "loom/core/stream.hpp"
#include "loom/nn/parameter.hpp"

namespace loom::optim {

// The global L2 norm of all the gradients (after multiplying them by pre_scale, e.g. 1 / loss
// scale), read back to the host.
float global_grad_norm(const std::vector<nn::Parameter*>& parameters, float pre_scale = 1.0f, StreamRef stream = {});

// The factor that brings a gradient of norm `norm` down to max_norm (1 when it already is below,
// or when max_norm <= 0 means no clipping). Pass it to the optimizer as grad_scale, so clipping
// costs no extra pass over the gradients.
float clip_factor(float norm, float max_norm);

}  // namespace loom::optim
