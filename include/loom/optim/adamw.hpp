// AdamW on the fused multi-tensor kernel: fp32 moments, decoupled weight decay only on
// parameters that ask for it (not biases, norms), fp32 masters for f16/bf16 parameters.
#pragma once

#include <vector>

#include "loom/optim/optimizer.hpp"

namespace loom::optim {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options);

  void step(float lr, float grad_scale = 1.0f, StreamRef stream = {}) override;
  std::string name() const override { return "adamw"; }
  // "<param>.exp_avg", "<param>.exp_avg_sq", and "<param>.master" where there is one.
  std::vector<StateTensor> state_tensors() const override;

  const Tensor& exp_avg(std::size_t i) const { return m_.at(i); }
  const Tensor& exp_avg_sq(std::size_t i) const { return v_.at(i); }
  const AdamWOptions& options() const noexcept { return options_; }

 private:
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
};

}  // namespace loom::optim
