// Dynamic loss scaling for fp16 training: the loss is multiplied by scale() before backward; the
// step unscales the gradients and checks them for inf/NaN in one pass. A step with a non-finite
// gradient is skipped and the scale halves; after `growth_interval` clean steps in a row it
// doubles. BF16 and fp32 need no scaling (use a disabled scaler: scale 1, never skips).
#pragma once

#include <cstdint>
#include <span>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::optim {

struct LossScalerOptions {
  bool enabled = true;
  float initial_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;
  float min_scale = 1.0f;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerOptions& options = {});

  float scale() const noexcept { return scale_; }
  // Multiplies every gradient by 1 / scale() in place and returns whether all of them are
  // finite; updates the scale and the counters. The caller skips the optimizer step on false.
  // With a communicator, grads are this rank's part of a sharded gradient and the verdict is the
  // ranks' (a collective): every rank skips, or none does.
  bool unscale_and_update(std::span<const Tensor> grads, comm::Communicator* comm = nullptr, StreamRef stream = {});
  // The same with the verdict agreed over a tensor-parallel group too (each of its ranks holds
  // other blocks of the gradient): a non-finite value anywhere skips the step on every rank.
  bool unscale_and_update(std::span<const Tensor> grads, comm::Communicator* comm, comm::Communicator* tensor,
                          StreamRef stream);
  // The state machine alone, for a step whose gradients were found (non-)finite elsewhere.
  void update(bool finite);

  std::int64_t skipped_steps() const noexcept { return skipped_; }
  std::int64_t clean_steps_in_a_row() const noexcept { return clean_in_a_row_; }
  // For checkpoints.
  void restore(float scale, std::int64_t clean_in_a_row, std::int64_t skipped);

 private:
  LossScalerOptions options_;
  float scale_;
  std::int64_t clean_in_a_row_ = 0, skipped_ = 0;
};

}  // namespace loom::optim
