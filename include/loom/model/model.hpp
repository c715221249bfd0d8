// What the training runtime needs from a model, whatever the model is: its parameter space, a
// forward (with the loss) and a backward over a batch, its precision policy, a description of its
// architecture for checkpoints, and unit hooks. Trainer, the checkpoints, the data-parallel reducer
// and the ZeRO engine work through this interface only; nn::GPT implements it, and so does the
// MLP of examples/train_mlp.
//
// Unit hooks: a model calls before_forward(u) before its forward touches the parameters of unit
// u, and before_backward(u) before its backward writes their gradients. ZeRO-2 binds a unit's
// gradient buffer there (ZeRO-3 will gather the unit's values).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/model/precision.hpp"

namespace loom::model {

// Each hook gets the unit and the stream the model's forward or backward runs on.
struct UnitHooks {
  std::function<void(std::size_t unit, StreamRef stream)> before_forward;
  std::function<void(std::size_t unit, StreamRef stream)> before_backward;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual ParameterSpace& parameter_space() noexcept = 0;
  virtual const ParameterSpace& parameter_space() const noexcept = 0;
  // inputs, targets: one micro-batch, as the model defines them (GPT: [B, T] i32 tokens and
  // targets). Returns the mean loss; keeps what backward needs.
  virtual float forward(const Tensor& inputs, const Tensor& targets, StreamRef stream = {}) = 0;
  // forward without waiting for the loss: its mean is added to loss_sum[0] ([1] f32 on the
  // model's device) in stream order, so a training step reads the loss of all its micro-batches
  // back once. This default runs forward and adds its result (GPT overrides it and never waits).
  virtual void forward_into(const Tensor& inputs, const Tensor& targets, const Tensor& loss_sum,
                            StreamRef stream = {});
  // Accumulates (+=) loss_scale x d(mean loss) into the gradients, marking each parameter's
  // gradient ready as soon as it is final.
  virtual void backward(float loss_scale = 1.0f, StreamRef stream = {}) = 0;
  virtual Device device() const noexcept = 0;
  virtual const Precision& precision() const noexcept = 0;
  // "gpt", "mlp": a checkpoint of one architecture never loads into another.
  virtual std::string architecture_name() const = 0;
  // The sizes that define the architecture (a checkpoint records them and refuses a mismatch).
  virtual std::vector<std::pair<std::string, std::int64_t>> architecture() const = 0;

  // Replaces the hooks (empty functions: none).
  void set_unit_hooks(UnitHooks hooks) { hooks_ = std::move(hooks); }

 protected:
  void before_forward(std::size_t unit, StreamRef stream) const {
    if (hooks_.before_forward) hooks_.before_forward(unit, stream);
  }
  void before_backward(std::size_t unit, StreamRef stream) const {
    if (hooks_.before_backward) hooks_.before_backward(unit, stream);
  }

 private:
  UnitHooks hooks_;
};

}  // namespace loom::model
