#include "loom/optim/adamw.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/kernels/optimizer.hpp"

namespace loom::optim {

AdamW::AdamW(model::ParameterSpace& space, const AdamWOptions& options, std::vector<model::ShardRange> ranges)
    : Optimizer(space, std::move(ranges)), options_(options) {
  require(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
          "AdamW: betas must lie in [0, 1), got ", options.beta1, " and ", options.beta2);
  require(options.eps > 0 && options.weight_decay >= 0, "AdamW: eps must be positive and weight_decay >= 0, got ",
          options.eps, " and ", options.weight_decay);
  m_ = add_state("exp_avg");
  v_ = add_state("exp_avg_sq");
  add_masters();
}

void AdamW::step(float lr, float grad_scale, StreamRef stream) {
  std::vector<kernels::AdamWTensor> tensors;
  require_current_layout();
  tensors.reserve(segments().size());
  for (const Segment& s : segments()) {
    tensors.push_back({updated(s), grad(s), local(m_, s), local(v_, s), low_precision_copy(s), s.decay});
  }
  kernels::AdamWHyperparameters hp;
  hp.lr = lr;
  hp.beta1 = options_.beta1;
  hp.beta2 = options_.beta2;
  hp.eps = options_.eps;
  hp.weight_decay = options_.weight_decay;
  hp.step = steps_taken() + 1;
  hp.grad_scale = grad_scale;
  // A rank whose ranges hold only padding (a unit smaller than 64 x ranks) has nothing to update.
  if (!tensors.empty()) kernels::adamw_step(tensors, hp, stream);
  count_step();
}

}  // namespace loom::optim
