// Multi-tensor gradient utilities for mixed-precision training: unscaling with a non-finite check
// (the loss scaler's step) and the global L2 norm (gradient clipping).
#pragma once

#include <span>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels {

// Every gradient *= scale in place (floating dtypes), and found_nonfinite ([1] f32, on the
// gradients' device) is set to 1 if any element is inf or NaN. It is never cleared here, so
// one flag can collect several calls; zero it before a step.
void unscale_and_check_finite(std::span<const Tensor> grads, float scale, const Tensor& found_nonfinite,
                              StreamRef stream = {});

// out ([1] f32) = sum over every element of every tensor of x^2.
void sum_of_squares(std::span<const Tensor> tensors, const Tensor& out, StreamRef stream = {});

// out ([1] f32) = sqrt(sum_of_squares(tensors)).
void global_l2_norm(std::span<const Tensor> tensors, const Tensor& out, StreamRef stream = {});

}  // namespace loom::kernels
