#include "src/ddp/bucket_plan.hpp"

#include "loom/core/error.hpp"

namespace loom::ddp::detail {

namespace {
std::int64_t aligned(std::int64_t elements) {
  return (elements + bucket_alignment_elements - 1) / bucket_alignment_elements * bucket_alignment_elements;
}
}  // namespace

std::vector<PlannedBucket> plan_buckets(std::span<const std::size_t> order, std::span<const std::int64_t> numels,
                                        std::int64_t element_bytes, std::int64_t bucket_bytes,
                                        std::int64_t first_bucket_bytes) {
  require(order.size() == numels.size(), "bucket plan: the order names ", order.size(), " parameters but there are ",
          numels.size());
  std::vector<bool> seen(numels.size(), false);
  std::vector<PlannedBucket> buckets;
  PlannedBucket current;
  std::int64_t filled_bytes = 0;
  for (const std::size_t index : order) {
    require(index < numels.size() && !seen[index], "bucket plan: the order is not a permutation of the ",
            numels.size(), " parameters (index ", index, ")");
    seen[index] = true;
    current.parameters.push_back(index);
    current.offsets.push_back(current.elements);
    current.elements = aligned(current.elements + numels[index]);
    filled_bytes += numels[index] * element_bytes;
    const std::int64_t cap = buckets.empty() ? first_bucket_bytes : bucket_bytes;
    if (filled_bytes >= cap) {
      buckets.push_back(std::move(current));
      current = PlannedBucket{};
      filled_bytes = 0;
    }
  }
  if (!current.parameters.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace loom::ddp::detail
