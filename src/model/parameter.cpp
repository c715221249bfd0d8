#include "loom/model/parameter.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::model {

Parameter::Parameter(std::string name, Tensor value, DType grad_dtype, bool weight_decay)
    : name_(std::move(name)), value_(std::move(value)), weight_decay_(weight_decay) {
  require(value_.defined(), "parameter '", name_, "' has no value");
  grad_ = Tensor::zeros(value_.shape(), grad_dtype, value_.device());
}

void Parameter::set_grad(Tensor grad) {
  require(grad.defined() && grad.shape() == value_.shape() && grad.device() == value_.device(),
          "parameter '", name_, "': a gradient must match the value ", value_, ", got ",
          grad);
  require(grad.dtype() == DType::f32, "parameter '", name_, "': gradients are f32 (the layers accumulate in f32), got ",
          grad.dtype());
  grad_ = std::move(grad);
}

void Parameter::bind(Tensor value, Tensor grad) {
  require(value.defined() && value.shape() == value_.shape() && value.dtype() == value_.dtype(), "parameter '", name_,
          "': a new value must match ", value_, ", got ", value);
  if (grad.defined()) {
    require(grad.shape() == value_.shape() && grad.dtype() == DType::f32 && grad.device() == value.device(),
            "parameter '", name_, "': a gradient must be f32 shaped like the value ", value_, ", got ", grad);
  }
  value_ = std::move(value);
  grad_ = std::move(grad);
}

void Parameter::zero_grad() {
  if (grad_.defined()) fill(grad_, 0.0);
}

Parameter::HookId Parameter::add_grad_ready_hook(GradReadyHook hook) {
  require(static_cast<bool>(hook), "parameter '", name_, "': empty gradient-ready hook");
  hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Parameter::remove_grad_ready_hook(HookId id) noexcept {
  std::erase_if(hooks_, [id](const auto& entry) { return entry.first == id; });
}

void Parameter::mark_grad_ready(StreamRef stream) {
  for (const auto& [id, hook] : hooks_) hook(*this, stream);
}

}  // namespace loom::model
