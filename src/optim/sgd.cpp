#include "loom/optim/sgd.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/kernels/optimizer.hpp"

namespace loom::optim {

SGD::SGD(model::ParameterSpace& space, const SgdOptions& options, std::vector<model::ShardRange> ranges)
    : Optimizer(space, std::move(ranges)), options_(options) {
  require(options.momentum >= 0 && options.dampening >= 0 && options.weight_decay >= 0,
          "SGD: momentum, dampening and weight_decay must be >= 0, got ", options.momentum, ", ", options.dampening,
          " and ", options.weight_decay);
  require(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
          "SGD: Nesterov momentum needs momentum > 0 and no dampening");
  if (options.momentum > 0) buffer_ = add_state("momentum_buffer");
  add_masters();
}

void SGD::step(float lr, float grad_scale, StreamRef stream) {
  std::vector<kernels::SgdTensor> tensors;
  require_current_layout();
  tensors.reserve(segments().size());
  for (const Segment& s : segments()) {
    tensors.push_back({updated(s), grad(s), buffer_.defined() ? local(buffer_, s) : Tensor(), low_precision_copy(s),
                       s.decay});
  }
  kernels::SgdHyperparameters hp;
  hp.lr = lr;
  hp.momentum = options_.momentum;
  hp.dampening = options_.dampening;
  hp.weight_decay = options_.weight_decay;
  hp.nesterov = options_.nesterov;
  hp.step = steps_taken() + 1;
  hp.grad_scale = grad_scale;
  // A rank whose ranges hold only padding (a unit smaller than 64 x ranks) has nothing to update.
  if (!tensors.empty()) kernels::sgd_step(tensors, hp, stream);
  count_step();
}

}  // namespace loom::optim
