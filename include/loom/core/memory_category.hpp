// What memory is for. The allocators count their bytes by category (loom::cpu_memory_stats, and
// CachingAllocator::stats on a GPU): an allocation counts under the category its thread is in when
// it is made (MemoryCategoryScope, set where loom allocates parameters, gradients, optimizer state,
// layer activations and communication buffers), and its bytes leave that category when it is
// freed, so the categories always add up to the allocator's total. What no scope names is `other`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom {

enum class MemoryCategory : std::uint8_t {
  other,
  parameters,     // parameter values (and ZeRO-3's value shards)
  gradients,      // parameter gradients
  optimizer,      // optimizer state (AdamW's moments and master weights, SGD's momentum)
  activations,    // the layers' buffers: activations kept for backward and their gradients
  communication,  // copies made to communicate: compressed gradient buckets, bf16 reduce-scatter inputs
                  // (ZeRO's gradient pool counts as gradients, its gathered values as parameters)
  workspace,      // reserved for kernel and library scratch: nothing sets it yet (it counts as other)
};
inline constexpr std::size_t memory_category_count = 7;
using CategoryBytes = std::array<std::int64_t, memory_category_count>;

std::string_view to_string(MemoryCategory category) noexcept;

// The category this thread's allocations count under now (`other` outside every scope).
MemoryCategory current_memory_category() noexcept;

// Sets this thread's category for its lifetime; scopes nest (the innermost wins).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category) noexcept;
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

}  // namespace loom
