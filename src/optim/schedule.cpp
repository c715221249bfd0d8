#include "loom/optim/schedule.hpp"

#include <cmath>
#include <numbers>

#include "loom/core/error.hpp"

namespace loom::optim {

float CosineSchedule::at(std::int64_t step) const {
  require(total != 0, "cosine schedule: no length (total = 0): set total to the number of optimizer steps of the run "
          "(the rate warms up over `warmup` steps, then decays from max_lr ", max_lr, " to min_lr ", min_lr,
          " by step total)");
  require(warmup >= 0 && total >= 1 && warmup <= total && min_lr >= 0 && max_lr >= min_lr,
          "cosine schedule: need 0 <= warmup <= total, total >= 1 and 0 <= min_lr <= max_lr; got warmup ", warmup,
          ", total ", total, ", min_lr ", min_lr, ", max_lr ", max_lr);
  require(step >= 0, "cosine schedule: step must be >= 0, got ", step);
  if (step < warmup) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(std::max<std::int64_t>(total - warmup, 1));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(min_lr + (max_lr - min_lr) * cosine);
}

}  // namespace loom::optim
