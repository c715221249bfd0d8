// The caching allocator over real cudaMalloc, and the direct allocator's OOM error.
#include <catch2/catch.hpp>

#include <cstdint>

#include "loom/core/caching_allocator.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Tensor;

TEST_CASE("cached device blocks are reused per stream and counted", "[cuda][allocator]") {
  auto allocator = loom::make_cuda_caching_allocator(0);
  loom::Stream s1(Device::cuda(0)), s2(Device::cuda(0));
  void* first = nullptr;
  {
    const Tensor t = Tensor::empty({1 << 20}, DType::f32, allocator, s1);
    first = t.raw_data();
    loom::fill(t, 1.0, s1);
    s1.synchronize();
  }
  {
    const Tensor same_stream = Tensor::empty({1 << 20}, DType::f32, allocator, s1);
    CHECK(same_stream.raw_data() == first);
    CHECK(same_stream.slice(0, 1).item<float>() == 1.0f);  // same block, contents as left
  }
  {
    // first is cached again, free; a request on another stream must still not get it.
    const Tensor other_stream = Tensor::empty({1 << 20}, DType::f32, allocator, s2);
    CHECK(other_stream.raw_data() != first);
  }
  const loom::AllocatorStats s = allocator->stats();
  CHECK(s.allocation_count == 3);
  CHECK(s.cache_hit_count == 1);
  CHECK(s.backing_allocation_count == 2);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.reserved_bytes == 2 * (std::uint64_t{4} << 20));
  allocator->empty_cache();
  CHECK(allocator->stats().reserved_bytes == 0);
}

TEST_CASE("an impossible device allocation is an out-of-memory error, and the device stays usable",
          "[cuda][allocator]") {
  const loom::CudaDeviceProperties props = loom::cuda_device_properties(0);
  auto allocator = loom::make_cuda_caching_allocator(0);
  const std::size_t too_much = props.total_memory_bytes * 2;
  CHECK_THROWS_MATCHES(allocator->allocate(too_much, {}), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::out_of_memory, {"cuda:0"}));
  CHECK_THROWS_MATCHES(Tensor::empty({static_cast<std::int64_t>(too_much)}, DType::u8, Device::cuda(0)), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::out_of_memory, {"cudaMalloc", "cuda:0"}));
  CHECK(Tensor::full({4}, DType::f32, 3.0, Device::cuda(0)).to_vector<float>() == std::vector<float>(4, 3.0f));
}
