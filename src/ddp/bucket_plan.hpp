// Which gradients share a communication bucket: a pure function of the parameter space's layout,
// so every rank computes the same plan. A bucket is one contiguous range of the space (its
// parameters, and the alignment gaps between them), filled in backward order: the reverse of the
// space's order.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/model/parameter_space.hpp"

namespace loom::ddp::detail {

struct PlannedBucket {
  std::vector<std::size_t> slots;  // the space's slots it holds, in backward order
  std::int64_t begin = 0, end = 0;  // elements [begin, end) of the space
  std::size_t unit = 0;             // the unit of its first slot (by_unit: its only unit)
};

// by_unit: one bucket per unit, covering the whole padded unit (ZeRO reduce-scatters units).
// Otherwise a bucket closes once it holds at least its cap in bytes of gradients (first_bucket_bytes
// for the first, bucket_bytes for the rest), so one large gradient can make a bucket larger than the
// cap; a cap <= 0 puts every gradient in a bucket of its own.
std::vector<PlannedBucket> plan_buckets(const model::ParameterSpace& space, std::int64_t bucket_bytes,
                                        std::int64_t first_bucket_bytes, bool by_unit);

}  // namespace loom::ddp::detail
