// SGD with momentum (PyTorch's rules: coupled L2 weight decay on parameters that ask for it,
// dampening, Nesterov) on the fused multi-tensor kernel, fp32 momentum buffers, fp32 masters for
// f16/bf16 parameters.
#pragma once

#include <vector>

#include "loom/optim/optimizer.hpp"

namespace loom::optim {

struct SgdOptions {
  float momentum = 0.9f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // ranges: see Optimizer (empty: the whole space).
  SGD(model::ParameterSpace& space, const SgdOptions& options, std::vector<model::ShardRange> ranges = {});

  void step(float lr, float grad_scale = 1.0f, StreamRef stream = {}) override;
  std::string name() const override { return "sgd"; }

 private:
  SgdOptions options_;
  Tensor buffer_;  // "momentum_buffer", with momentum
};

}  // namespace loom::optim
