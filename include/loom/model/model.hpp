// What the training runtime needs from a model, whatever the model is: its parameter space, a
// forward (with the loss) and a backward over a batch, its precision policy, a description of its
// architecture for checkpoints, and unit hooks. Trainer, the checkpoints, the data-parallel reducer
// and the ZeRO engine work through this interface only; nn::GPT implements it, and so does the
// MLP of examples/train_mlp.
//
// Unit hooks: a model calls before_forward(u) before its forward touches the parameters of unit
// u and after_forward(u) once its forward is done with them; before_backward(u) before its
// backward reads their values or writes their gradients and after_backward(u) once it is done with
// them. A unit the model uses at both ends of forward and backward (GPT's embeddings, whose
// weights are also the head) is a root unit: root_units() names them, its before_* comes first
// and its after_* last. ZeRO-2 binds a unit's gradient buffer before its backward; ZeRO-3 also
// gathers the unit's values before each use and releases them after it. Several subscribers may
// hold hooks at once: before_* run in the order they were added, after_* in the reverse order.
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

// Each hook gets the unit and the stream the model's forward or backward runs on; an empty
// function is no hook.
struct UnitHooks {
  using Hook = std::function<void(std::size_t unit, StreamRef stream)>;
  Hook before_forward, after_forward;
  Hook before_backward, after_backward;
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

  // The ranks of the tensor-parallel group its layers are split over (1: not split). Checkpoints
  // use it to tell which ranks hold the same pieces: in a data x tensor mesh world rank w is
  // tensor rank w % tensor_ranks() of data rank w / tensor_ranks() (topo/mesh.hpp).
  virtual int tensor_ranks() const noexcept { return 1; }
  // This rank's place in that group (0 when not split).
  virtual int tensor_rank() const noexcept { return 0; }

  // Units used across the whole of forward and of backward (see above); none by default.
  virtual std::vector<std::size_t> root_units() const { return {}; }

  // Adds a subscriber; the id removes it (an engine detaches itself when destroyed).
  using HooksId = std::uint64_t;
  HooksId add_unit_hooks(UnitHooks hooks);
  void remove_unit_hooks(HooksId id) noexcept;

 protected:
  void before_forward(std::size_t unit, StreamRef stream) const;
  void after_forward(std::size_t unit, StreamRef stream) const;
  void before_backward(std::size_t unit, StreamRef stream) const;
  void after_backward(std::size_t unit, StreamRef stream) const;

 private:
  std::vector<std::pair<HooksId, UnitHooks>> hooks_;
  HooksId next_hooks_id_ = 1;
};

}  // namespace loom::model
