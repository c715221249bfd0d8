#include "loom/core/device_calls.hpp"

#include <atomic>

namespace loom {

namespace {

std::atomic<std::uint64_t> counters[5];

}  // namespace

DeviceCallCounts device_call_counts() noexcept {
  DeviceCallCounts c;
  c.device_allocations = counters[0].load(std::memory_order_relaxed);
  c.device_frees = counters[1].load(std::memory_order_relaxed);
  c.blas_handles = counters[2].load(std::memory_order_relaxed);
  c.blas_algorithm_searches = counters[3].load(std::memory_order_relaxed);
  c.attribute_queries = counters[4].load(std::memory_order_relaxed);
  return c;
}

namespace detail {

void count_device_call(DeviceCall call) noexcept {
  counters[static_cast<int>(call)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

}  // namespace loom
