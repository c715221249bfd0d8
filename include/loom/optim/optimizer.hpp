// What every optimizer shares: the parameters it updates, fp32 master copies of parameters that
// are stored in f16/bf16 (the stored parameters are rewritten from them in the same fused pass),
// a step counter, and its state as named tensors for checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/nn/parameter.hpp"

namespace loom::optim {

// One tensor of optimizer state, named after its parameter ("h0.ln1.weight.exp_avg").
struct StateTensor {
  std::string name;
  Tensor tensor;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter*> parameters);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update with learning rate lr; every gradient is multiplied by grad_scale first (loss
  // unscaling and clipping in the same pass).
  virtual void step(float lr, float grad_scale = 1.0f, StreamRef stream = {}) = 0;
  virtual std::string name() const = 0;  // "adamw", "sgd": checkpoints refuse another one
  // Every state tensor (masters included) under a stable name; restoring copies into them.
  virtual std::vector<StateTensor> state_tensors() const = 0;

  std::int64_t steps_taken() const noexcept { return steps_; }
  void set_steps_taken(std::int64_t steps);
  const std::vector<nn::Parameter*>& parameters() const noexcept { return parameters_; }
  // The fp32 master of parameter i (undefined when the parameter itself is f32).
  const Tensor& master(std::size_t i) const { return masters_.at(i); }

 protected:
  // The tensor the update writes (master or parameter) and the low-precision copy to refresh.
  const Tensor& updated(std::size_t i) const;
  Tensor low_precision_copy(std::size_t i) const;
  void append_masters(std::vector<StateTensor>& out) const;
  void count_step() noexcept { ++steps_; }

 private:
  std::vector<nn::Parameter*> parameters_;
  std::vector<Tensor> masters_;
  std::int64_t steps_ = 0;
};

}  // namespace loom::optim
