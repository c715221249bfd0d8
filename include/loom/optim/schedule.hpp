// Learning-rate schedule: linear warmup over `warmup` steps (step s < warmup gets
// max_lr * (s + 1) / warmup, so the first step already moves), then cosine decay to min_lr at
// step `total`, constant after.
#pragma once

#include <cstdint>

namespace loom::optim {

struct CosineSchedule {
  float max_lr = 3e-4f;
  float min_lr = 3e-5f;
  std::int64_t warmup = 0;
  std::int64_t total = 1;

  // The learning rate of 0-based step `step`; throws on an inconsistent schedule.
  float at(std::int64_t step) const;
};

}  // namespace loom::optim
