#include "loom/optim/sgd.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/kernels/optimizer.hpp"

namespace loom::optim {

SGD::SGD(std::vector<nn::Parameter*> parameters, const SgdOptions& options)
    : Optimizer(std::move(parameters)), options_(options) {
  require(options.momentum >= 0 && options.dampening >= 0 && options.weight_decay >= 0,
          "SGD: momentum, dampening and weight_decay must be >= 0, got ", options.momentum, ", ", options.dampening,
          " and ", options.weight_decay);
  require(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
          "SGD: Nesterov momentum needs momentum > 0 and no dampening");
  for (const nn::Parameter* p : this->parameters()) {
    buffers_.push_back(options.momentum > 0 ? Tensor::zeros(p->value().shape(), DType::f32, p->value().device())
                                            : Tensor());
  }
}

std::vector<StateTensor> SGD::state_tensors() const {
  std::vector<StateTensor> out;
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    if (buffers_[i].defined()) out.push_back({parameters()[i]->name() + ".momentum_buffer", buffers_[i]});
  }
  append_masters(out);
  return out;
}

void SGD::step(float lr, float grad_scale, StreamRef stream) {
  std::vector<kernels::SgdTensor> tensors;
  tensors.reserve(parameters().size());
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    const nn::Parameter& p = *parameters()[i];
    tensors.push_back({updated(i), p.grad(), buffers_[i], low_precision_copy(i), p.weight_decay()});
  }
  kernels::SgdHyperparameters hp;
  hp.lr = lr;
  hp.momentum = options_.momentum;
  hp.dampening = options_.dampening;
  hp.weight_decay = options_.weight_decay;
  hp.nesterov = options_.nesterov;
  hp.step = steps_taken() + 1;
  hp.grad_scale = grad_scale;
  kernels::sgd_step(tensors, hp, stream);
  count_step();
}

}  // namespace loom::optim
