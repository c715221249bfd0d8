// A trainable tensor: its name (the checkpoint key), its value in the model's storage dtype, its
// fp32 gradient, whether weight decay applies, and "gradient ready" hooks. A parameter describes
// the tensor; once a ParameterSpace takes it in, its value and gradient are views into the space's
// flat buffers (and under ZeRO-2 the gradient is bound only while its unit's backward runs). Layers accumulate into
// grad() during backward and call mark_grad_ready() the moment a parameter's gradient is final for
// this backward pass, in backward order; a gradient all-reduce engine subscribes to start
// communicating while the rest of backward still runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::model {

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&, StreamRef)>;
  using HookId = std::uint64_t;

  // value: the parameter as the model stores it; the gradient is allocated zeroed, in grad_dtype,
  // on the value's device.
  Parameter(std::string name, Tensor value, DType grad_dtype, bool weight_decay);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const std::string& name() const noexcept { return name_; }
  const Tensor& value() const noexcept { return value_; }
  const Tensor& grad() const noexcept { return grad_; }
  bool weight_decay() const noexcept { return weight_decay_; }

  // Replaces the gradient storage (for example with a view into a communication bucket); it
  // must have the value's shape and device and dtype f32.
  void set_grad(Tensor grad);
  // Rebinds the value (same shape and dtype; its contents are the caller's business) and the
  // gradient (f32 of the value's shape, or undefined: no gradient storage now).
  void bind(Tensor value, Tensor grad);
  bool has_grad() const noexcept { return grad_.defined(); }
  void zero_grad();  // nothing to do without gradient storage

  // Returns an id for remove_grad_ready_hook (a reducer detaches itself when destroyed).
  HookId add_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(HookId id) noexcept;
  // Runs the hooks, in the order they were added, with the stream the gradient was computed on.
  // Called by layers during backward.
  void mark_grad_ready(StreamRef stream = {});

 private:
  std::string name_;
  Tensor value_;
  Tensor grad_;
  bool weight_decay_;
  std::vector<std::pair<HookId, GradReadyHook>> hooks_;
  HookId next_hook_id_ = 1;
};

}  // namespace loom::model
