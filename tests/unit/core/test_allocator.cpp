// The CPU allocator's memory limit (set_cpu_memory_limit, LOOM_MEMORY_LIMIT): an allocation that
// would take the live bytes over it throws an out_of_memory Error naming the category it was for,
// the limit and what is live by category, and allocates nothing; under the limit it allocates as
// before; sizes parse with K/M/G/T suffixes and bad ones are named.
#include <catch2/catch.hpp>

#include "loom/core/allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/core/memory_category.hpp"
#include "loom/core/tensor.hpp"

namespace {

struct LimitGuard {  // restores the limit the process started with
  std::int64_t before = loom::cpu_memory_limit();
  ~LimitGuard() { loom::set_cpu_memory_limit(before); }
};

}  // namespace

TEST_CASE("the CPU memory limit refuses an allocation past it by name and allocates nothing", "[core][allocator]") {
  const LimitGuard guard;
  const std::int64_t live = loom::cpu_memory_stats().live_bytes;
  loom::set_cpu_memory_limit(live + (4 << 20));
  loom::Tensor kept;
  {
    const loom::MemoryCategoryScope scope(loom::MemoryCategory::optimizer);
    kept = loom::Tensor::empty({1 << 19}, loom::DType::f32, loom::Device::cpu());  // 2 MiB: fits
  }
  const loom::MemoryCategoryScope scope(loom::MemoryCategory::activations);
  try {
    (void)loom::Tensor::empty({1 << 20}, loom::DType::f32, loom::Device::cpu());  // 4 MiB more: does not
    FAIL("no error past the limit");
  } catch (const loom::Error& error) {
    CHECK(error.category() == loom::ErrorCategory::out_of_memory);
    CHECK_THAT(error.what(), Catch::Contains("out of memory: 4.0 MiB more of activations would take the CPU's live "
                                             "memory over its limit") &&
                                 Catch::Contains("(LOOM_MEMORY_LIMIT); live now: ") && Catch::Contains("optimizer 2.0 MiB"));
  }
  CHECK(loom::cpu_memory_stats().live_bytes == live + (2 << 20));
  loom::set_cpu_memory_limit(0);  // none: the same request goes through
  CHECK(loom::Tensor::empty({1 << 20}, loom::DType::f32, loom::Device::cpu()).nbytes() == 4 << 20);
  CHECK_THROWS_WITH(loom::set_cpu_memory_limit(-1), Catch::Contains("zero (none) or positive"));
}

TEST_CASE("memory sizes parse with binary suffixes and bad ones are named", "[core][allocator]") {
  CHECK(loom::parse_memory_size("512M", "x") == 512LL << 20);
  CHECK(loom::parse_memory_size("2G", "x") == 2LL << 30);
  CHECK(loom::parse_memory_size("1.5K", "x") == 1536);
  CHECK(loom::parse_memory_size("4096", "x") == 4096);
  CHECK(loom::parse_memory_size("1T", "x") == 1LL << 40);
  for (const char* bad : {"", "lots", "12Q", "-1G", "0", "0.5", "inf", "nan", "1e30"}) {
    CHECK_THROWS_WITH(loom::parse_memory_size(bad, "LOOM_MEMORY_LIMIT"),
                      Catch::Contains("LOOM_MEMORY_LIMIT: '" + std::string(bad) + "' is not a size"));
  }
}
