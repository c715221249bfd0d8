// Learning-rate schedule: linear warmup over `warmup` steps (step s < warmup gets
// max_lr * (s + 1) / warmup, so the first step already moves), then cosine decay to min_lr at
// step `total`, constant after. `total` has no default: it is the run's number of optimizer steps,
// and a schedule without it (0) is refused, rather than decaying to min_lr after one step.
#pragma once

#include <cstdint>

namespace loom::optim {

struct CosineSchedule {
  float max_lr = 3e-4f;
  float min_lr = 3e-5f;
  std::int64_t warmup = 0;
  std::int64_t total = 0;  // required: the run's optimizer steps

  // The learning rate of 0-based step `step`; throws on an inconsistent schedule.
  float at(std::int64_t step) const;
};

}  // namespace loom::optim
