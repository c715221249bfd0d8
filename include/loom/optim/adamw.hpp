// AdamW over a model's parameters on the fused multi-tensor kernel: fp32 master weights (the
// parameters themselves for fp32 storage; separate fp32 copies for f16/bf16 storage, with the
// stored parameters rewritten from them in the same pass), fp32 moments, decoupled weight decay
// only on parameters that ask for it (not biases, norms).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/nn/parameter.hpp"

namespace loom::optim {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  // Per-parameter state. master is undefined when the parameter itself is f32.
  struct State {
    Tensor master, m, v;
  };

  AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options);

  // One update with learning rate lr; every gradient is multiplied by grad_scale first (loss
  // unscaling and clipping in the same pass).
  void step(float lr, float grad_scale = 1.0f, StreamRef stream = {});

  std::int64_t steps_taken() const noexcept { return steps_; }
  // For checkpoints: restoring sets the step count and the state tensors' contents.
  void set_steps_taken(std::int64_t steps);
  const std::vector<State>& state() const noexcept { return state_; }
  const std::vector<nn::Parameter*>& parameters() const noexcept { return parameters_; }
  const AdamWOptions& options() const noexcept { return options_; }

 private:
  std::vector<nn::Parameter*> parameters_;
  AdamWOptions options_;
  std::vector<State> state_;
  std::int64_t steps_ = 0;
};

}  // namespace loom::optim
