// DeviceStager's ring on the CPU, where its copies are immediate: what stage() returns equals the
// host tensors, stays as it was for slots - 1 further calls while the host tensors change, follows
// a change of batch shape, and refuses a stream of another device. (On a GPU the same calls are
// checked by tests/cuda/test_cuda_stream.cpp.)
#include <catch2/catch.hpp>

#include <vector>

#include "loom/core/device_stager.hpp"
#include "loom/core/error.hpp"

using loom::Tensor;

namespace {

Tensor counting(std::int64_t rows, std::int64_t cols, std::int32_t base) {
  std::vector<std::int32_t> values(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = base + static_cast<std::int32_t>(i);
  return Tensor::from_vector(values, {rows, cols});
}

}  // namespace

TEST_CASE("DeviceStager hands out copies that outlive slots - 1 further batches", "[core][stager]") {
  loom::DeviceStager stager(loom::Device::cpu(), 3);
  CHECK(stager.slots() == 3);
  const loom::Stream stream(loom::Device::cpu());
  std::vector<std::vector<Tensor>> handed;
  Tensor tokens = counting(2, 5, 0), targets = counting(2, 5, 100);
  for (std::int32_t b = 0; b < 8; ++b) {
    tokens = counting(2, 5, 1000 * b);
    targets = counting(2, 5, 1000 * b + 500);
    handed.push_back(stager.stage({tokens, targets}, stream));
    REQUIRE(handed.back().size() == 2);
    CHECK_FALSE(handed.back()[0].shares_storage_with(tokens));
    // The host batch may be reused at once: the copies are the stager's.
    tokens.span<std::int32_t>()[0] = -1;
    // This batch and the two before it are still intact.
    for (std::int32_t k = std::max(0, b - 2); k <= b; ++k) {
      INFO("batch " << k << " after staging batch " << b);
      CHECK(handed[static_cast<std::size_t>(k)][0].to_vector<std::int32_t>() ==
            counting(2, 5, 1000 * k).to_vector<std::int32_t>());
      CHECK(handed[static_cast<std::size_t>(k)][1].to_vector<std::int32_t>() ==
            counting(2, 5, 1000 * k + 500).to_vector<std::int32_t>());
    }
  }
  // A new batch shape (an evaluation batch) gets buffers of its own shape.
  const std::vector<Tensor> odd = stager.stage({counting(3, 7, 42)}, stream);
  CHECK(odd.size() == 1);
  CHECK(odd[0].shape() == loom::Shape{3, 7});
  CHECK(odd[0].to_vector<std::int32_t>() == counting(3, 7, 42).to_vector<std::int32_t>());
}

TEST_CASE("DeviceStager refuses what it cannot do, by name", "[core][stager]") {
  CHECK_THROWS_WITH(loom::DeviceStager(loom::Device::cpu(), 1), Catch::Contains("slots must be at least 2, got 1"));
  loom::DeviceStager stager(loom::Device::cpu());
  CHECK_THROWS_WITH(stager.stage({counting(1, 2, 0)}, loom::StreamRef(loom::Device::cuda(0), nullptr)),
                    Catch::Contains("the stream is on cuda:0"));
}
