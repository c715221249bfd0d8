// The bucket plans of bucket_scheduler.hpp: pure functions of the space's layout, so every rank
// computes the same plan.
#include "loom/ddp/bucket_scheduler.hpp"

#include <algorithm>

namespace loom::ddp {

std::vector<PlannedBucket> buckets_by_unit(const model::ParameterSpace& space) {
  const auto& units = space.units();
  std::vector<PlannedBucket> buckets;
  for (std::size_t u = units.size(); u-- > 0;) {
    buckets.push_back({{units[u].slots.rbegin(), units[u].slots.rend()}, units[u].begin,
                       units[u].begin + units[u].elements, u});
  }
  return buckets;
}

std::vector<PlannedBucket> buckets_by_size(const model::ParameterSpace& space, std::int64_t bucket_bytes,
                                           std::int64_t first_bucket_bytes) {
  const auto& units = space.units();
  const auto& slots = space.slots();
  std::vector<PlannedBucket> buckets;
  PlannedBucket current;
  std::int64_t filled_bytes = 0;
  for (std::size_t u = units.size(); u-- > 0;) {
    for (auto it = units[u].slots.rbegin(); it != units[u].slots.rend(); ++it) {
      const model::Slot& slot = slots[*it];
      if (current.slots.empty()) {
        current.end = slot.offset + slot.numel;
        current.unit = u;
      }
      current.slots.push_back(*it);
      current.begin = slot.offset;
      filled_bytes += slot.numel * static_cast<std::int64_t>(sizeof(float));
      const std::int64_t cap = buckets.empty() ? first_bucket_bytes : bucket_bytes;
      if (filled_bytes >= cap) {
        buckets.push_back(std::move(current));
        current = PlannedBucket{};
        filled_bytes = 0;
      }
    }
  }
  if (!current.slots.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace loom::ddp
