#include "loom/optim/adamw.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/kernels/optimizer.hpp"

namespace loom::optim {

AdamW::AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options)
    : parameters_(std::move(parameters)), options_(options) {
  require(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
          "AdamW: betas must lie in [0, 1), got ", options.beta1, " and ", options.beta2);
  require(options.eps > 0 && options.weight_decay >= 0, "AdamW: eps must be positive and weight_decay >= 0, got ",
          options.eps, " and ", options.weight_decay);
  for (nn::Parameter* p : parameters_) {
    require(p != nullptr, "AdamW: null parameter");
    const Tensor& value = p->value();
    State s;
    if (value.dtype() != DType::f32) {
      s.master = Tensor::empty(value.shape(), DType::f32, value.device());
      kernels::cast(value, s.master);
    }
    s.m = Tensor::zeros(value.shape(), DType::f32, value.device());
    s.v = Tensor::zeros(value.shape(), DType::f32, value.device());
    state_.push_back(std::move(s));
  }
}

void AdamW::set_steps_taken(std::int64_t steps) {
  require(steps >= 0, "AdamW: step count must be >= 0, got ", steps);
  steps_ = steps;
}

void AdamW::step(float lr, float grad_scale, StreamRef stream) {
  std::vector<kernels::AdamWTensor> tensors;
  tensors.reserve(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    nn::Parameter& p = *parameters_[i];
    const State& s = state_[i];
    kernels::AdamWTensor t;
    t.param = s.master.defined() ? s.master : p.value();
    t.grad = p.grad();
    t.m = s.m;
    t.v = s.v;
    if (s.master.defined()) t.model = p.value();
    t.decay = p.weight_decay();
    tensors.push_back(std::move(t));
  }
  kernels::AdamWHyperparameters hp;
  hp.lr = lr;
  hp.beta1 = options_.beta1;
  hp.beta2 = options_.beta2;
  hp.eps = options_.eps;
  hp.weight_decay = options_.weight_decay;
  hp.step = steps_ + 1;
  hp.grad_scale = grad_scale;
  kernels::adamw_step(tensors, hp, stream);
  ++steps_;
}

}  // namespace loom::optim
