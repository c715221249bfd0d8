#include "loom/optim/optimizer.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"

namespace loom::optim {

Optimizer::Optimizer(std::vector<nn::Parameter*> parameters) : parameters_(std::move(parameters)) {
  for (nn::Parameter* p : parameters_) {
    require(p != nullptr, "optimizer: null parameter");
    Tensor master;
    if (p->value().dtype() != DType::f32) {
      master = Tensor::empty(p->value().shape(), DType::f32, p->value().device());
      kernels::cast(p->value(), master);
    }
    masters_.push_back(std::move(master));
  }
}

void Optimizer::set_steps_taken(std::int64_t steps) {
  require(steps >= 0, name(), ": step count must be >= 0, got ", steps);
  steps_ = steps;
}

const Tensor& Optimizer::updated(std::size_t i) const {
  return masters_[i].defined() ? masters_[i] : parameters_[i]->value();
}

Tensor Optimizer::low_precision_copy(std::size_t i) const {
  return masters_[i].defined() ? parameters_[i]->value() : Tensor();
}

void Optimizer::append_masters(std::vector<StateTensor>& out) const {
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (masters_[i].defined()) out.push_back({parameters_[i]->name() + ".master", masters_[i]});
  }
}

}  // namespace loom::optim
