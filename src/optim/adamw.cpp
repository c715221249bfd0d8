#include "loom/optim/adamw.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/kernels/optimizer.hpp"

namespace loom::optim {

AdamW::AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options)
    : Optimizer(std::move(parameters)), options_(options) {
  require(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
          "AdamW: betas must lie in [0, 1), got ", options.beta1, " and ", options.beta2);
  require(options.eps > 0 && options.weight_decay >= 0, "AdamW: eps must be positive and weight_decay >= 0, got ",
          options.eps, " and ", options.weight_decay);
  for (const nn::Parameter* p : this->parameters()) {
    m_.push_back(Tensor::zeros(p->value().shape(), DType::f32, p->value().device()));
    v_.push_back(Tensor::zeros(p->value().shape(), DType::f32, p->value().device()));
  }
}

std::vector<StateTensor> AdamW::state_tensors() const {
  std::vector<StateTensor> out;
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    out.push_back({parameters()[i]->name() + ".exp_avg", m_[i]});
    out.push_back({parameters()[i]->name() + ".exp_avg_sq", v_[i]});
  }
  append_masters(out);
  return out;
}

void AdamW::step(float lr, float grad_scale, StreamRef stream) {
  std::vector<kernels::AdamWTensor> tensors;
  tensors.reserve(parameters().size());
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    const nn::Parameter& p = *parameters()[i];
    tensors.push_back({updated(i), p.grad(), m_[i], v_[i], low_precision_copy(i), p.weight_decay()});
  }
  kernels::AdamWHyperparameters hp;
  hp.lr = lr;
  hp.beta1 = options_.beta1;
  hp.beta2 = options_.beta2;
  hp.eps = options_.eps;
  hp.weight_decay = options_.weight_decay;
  hp.step = steps_taken() + 1;
  hp.grad_scale = grad_scale;
  kernels::adamw_step(tensors, hp, stream);
  count_step();
}

}  // namespace loom::optim
