#include "loom/optim/clip.hpp"

#include <cmath>

#include "loom/kernels/grad_utils.hpp"

namespace loom::optim {

float global_grad_norm(const std::vector<nn::Parameter*>& parameters, float pre_scale, StreamRef stream) {
  if (parameters.empty()) return 0.0f;
  std::vector<Tensor> grads;
  for (nn::Parameter* p : parameters) grads.push_back(p->grad());
  const Tensor out = Tensor::empty({1}, DType::f32, grads.front().device());
  kernels::global_l2_norm(grads, out, stream);
  synchronize(stream);
  return out.item<float>() * std::fabs(pre_scale);
}

float clip_factor(float norm, float max_norm) {
  if (max_norm <= 0.0f || !std::isfinite(norm) || norm <= max_norm) return 1.0f;
  return max_norm / (norm + 1e-6f);
}

}  // namespace loom::optim
