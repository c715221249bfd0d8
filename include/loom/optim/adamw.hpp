// AdamW on the fused multi-tensor kernel: fp32 moments, decoupled weight decay only on
// parameters that ask for it (not biases, norms), fp32 masters for f16/bf16 parameters.
#pragma once

#include <vector>

#include "loom/kernels/optimizer.hpp"
#include "loom/model/parameter_space.hpp"

#include "loom/optim/optimizer.hpp"

namespace loom::optim {

struct AdamWOptions {  // defaults: kernels::AdamWHyperparameters, loom's one set
  float beta1 = kernels::AdamWHyperparameters{}.beta1;
  float beta2 = kernels::AdamWHyperparameters{}.beta2;
  float eps = kernels::AdamWHyperparameters{}.eps;
  float weight_decay = kernels::AdamWHyperparameters{}.weight_decay;
};

class AdamW : public Optimizer {
 public:
  // ranges: see Optimizer (empty: the whole space).
  AdamW(model::ParameterSpace& space, const AdamWOptions& options, std::vector<model::ShardRange> ranges = {});

  void step(float lr, float grad_scale = 1.0f, StreamRef stream = {}) override;
  std::string name() const override { return "adamw"; }
  const AdamWOptions& options() const noexcept { return options_; }

 private:
  AdamWOptions options_;
  Tensor m_, v_;  // "exp_avg", "exp_avg_sq"
};

}  // namespace loom::optim
