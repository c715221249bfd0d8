#include "loom/optim/loss_scaler.hpp"

#include <algorithm>

#include "loom/core/caching_allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/kernels/grad_utils.hpp"

namespace loom::optim {

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.enabled ? options.initial_scale : 1.0f) {
  require(options.initial_scale > 0 && options.growth_factor >= 1 && options.backoff_factor > 0 &&
              options.backoff_factor < 1 && options.growth_interval >= 1 && options.min_scale > 0,
          "loss scaler: need initial_scale > 0, growth_factor >= 1, 0 < backoff_factor < 1, growth_interval >= 1 "
          "and min_scale > 0");
}

bool DynamicLossScaler::unscale_and_update(std::span<const Tensor> grads, comm::Communicator* comm, StreamRef stream) {
  return unscale_and_update(grads, comm, nullptr, stream);
}

bool DynamicLossScaler::unscale_and_update(std::span<const Tensor> grads, comm::Communicator* comm,
                                           comm::Communicator* tensor, StreamRef stream) {
  if (tensor != nullptr && tensor->size() == 1) tensor = nullptr;
  if (!options_.enabled || (grads.empty() && comm == nullptr && tensor == nullptr)) return true;
  const Tensor flag =
      scratch_zeros({1}, DType::f32,
                    comm != nullptr ? comm->device() : tensor != nullptr ? tensor->device() : grads.front().device(),
                    stream);
  if (!grads.empty()) kernels::unscale_and_check_finite(grads, 1.0f / scale_, flag, stream);
  if (comm != nullptr) {
    comm->all_reduce(flag, flag, comm::ReduceOp::max, stream).wait();
  }
  if (tensor != nullptr) tensor->all_reduce(flag, flag, comm::ReduceOp::max, stream).wait();
  synchronize(stream);
  const bool finite = flag.to(Device::cpu()).item<float>() == 0.0f;
  update(finite);
  return finite;
}

void DynamicLossScaler::update(bool finite) {
  if (!options_.enabled) return;
  if (!finite) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    clean_in_a_row_ = 0;
    ++skipped_;
    return;
  }
  if (++clean_in_a_row_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_in_a_row_ = 0;
  }
}

void DynamicLossScaler::restore(float scale, std::int64_t clean_in_a_row, std::int64_t skipped) {
  require(scale > 0 && clean_in_a_row >= 0 && skipped >= 0, "loss scaler: invalid restored state (scale ", scale,
          ", clean steps ", clean_in_a_row, ", skipped ", skipped, ")");
  scale_ = scale;
  clean_in_a_row_ = clean_in_a_row;
  skipped_ = skipped;
}

}  // namespace loom::optim
