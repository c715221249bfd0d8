// CPU implementations of the optimizer and gradient-utility kernels (validated by src/kernels).
#pragma once

#include "loom/kernels/grad_utils.hpp"
#include "loom/kernels/optimizer.hpp"

namespace loom::kernels::cpu {

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hp);
void sgd_step(std::span<const SgdTensor> tensors, const SgdHyperparameters& hp);
void unscale_and_check_finite(std::span<const Tensor> grads, float scale, const Tensor& found_nonfinite);
double sum_of_squares(std::span<const Tensor> tensors);

}  // namespace loom::kernels::cpu
