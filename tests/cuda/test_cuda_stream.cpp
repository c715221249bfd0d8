// CUDA streams and events: ordering across streams and timing.
#include <catch2/catch.hpp>

#include "loom/core/device_stager.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Event;
using loom::Stream;
using loom::Tensor;

TEST_CASE("a stream waiting on an event sees the other stream's writes", "[cuda][stream]") {
  const Device gpu = Device::cuda(0);
  Stream producer(gpu), consumer(gpu);
  const std::int64_t n = 1 << 24;
  const Tensor a = Tensor::empty({n}, DType::f32, gpu);
  const Tensor b = Tensor::empty({n}, DType::f32, gpu);
  loom::test::poison(a);
  loom::test::poison(b);
  // Enough work on the producer that a consumer not waiting for it would read stale values.
  for (int i = 0; i < 20; ++i) loom::fill(a, i, producer);
  loom::fill(a, 5.0, producer);
  Event ready(gpu);
  ready.record(producer);
  consumer.wait(ready);
  loom::copy(b, a, consumer);
  consumer.synchronize();
  CHECK(ready.query());
  const std::vector<float> values = b.to_vector<float>();
  for (std::size_t i = 0; i < values.size(); i += 4097) REQUIRE(values[i] == 5.0f);
  CHECK(values.back() == 5.0f);
}

TEST_CASE("timed events measure device work", "[cuda][stream]") {
  const Device gpu = Device::cuda(0);
  Stream stream(gpu);
  Event start(gpu, true), end(gpu, true);
  const Tensor big = Tensor::empty({1 << 26}, DType::f32, gpu);
  start.record(stream);
  for (int i = 0; i < 10; ++i) loom::fill(big, i, stream);
  end.record(stream);
  end.synchronize();
  CHECK(stream.query());
  const float ms = start.elapsed_ms(end);
  CHECK(ms > 0.0f);
  CHECK(ms < 10000.0f);
  CHECK_THROWS_AS(start.record(loom::StreamRef(Device::cuda(1), nullptr)), loom::Error);
}

TEST_CASE("DeviceStager's copies reach a busy compute stream in order", "[cuda][stream][stager]") {
  const Device gpu = Device::cuda(0);
  Stream compute(gpu);
  loom::DeviceStager stager(gpu, 3);
  const Tensor busy = Tensor::empty({1 << 24}, DType::f32, gpu);
  const Tensor seen = Tensor::empty({8, 256}, DType::i32, gpu);
  for (std::int32_t b = 0; b < 8; ++b) {
    // The compute stream is far behind the host: a stager that refilled a slot's device buffer
    // before the compute stream had read it would leave a later batch's values in an earlier row.
    for (int i = 0; i < 5; ++i) loom::fill(busy, i, compute);
    const Tensor host = Tensor::full({256}, DType::i32, 1000.0 * b);
    const std::vector<Tensor> staged = stager.stage({host}, compute);
    REQUIRE(staged[0].device() == gpu);
    loom::copy(seen.select(b), staged[0], compute);
  }
  compute.synchronize();
  const std::vector<std::int32_t> values = seen.to_vector<std::int32_t>();
  for (std::size_t i = 0; i < values.size(); ++i) REQUIRE(values[i] == 1000 * static_cast<std::int32_t>(i / 256));
}

TEST_CASE("DeviceStager's consumer waits for a copy still in flight", "[cuda][stream][stager]") {
  const Device gpu = Device::cuda(0);
  Stream consumer(gpu);
  loom::DeviceStager stager(gpu, 2);
  // 64 MiB take a millisecond or more to cross; the idle consumer reads them at once, so a read
  // that did not wait for the copy would see the previous contents (poisoned, then batch b - 2's).
  const std::int64_t n = 1 << 24;
  const Tensor seen = Tensor::empty({n}, DType::f32, gpu);
  for (int b = 0; b < 4; ++b) {
    loom::test::poison(seen);
    const Tensor host = Tensor::full({n}, DType::f32, 1.0 + b);
    const std::vector<Tensor> staged = stager.stage({host}, consumer);
    loom::copy(seen, staged[0], consumer);
    consumer.synchronize();
    const std::vector<float> values = seen.to_vector<float>();
    INFO("batch " << b);
    for (std::size_t i = 0; i < values.size(); i += 65537) REQUIRE(values[i] == 1.0f + static_cast<float>(b));
    REQUIRE(values.back() == 1.0f + static_cast<float>(b));
  }
}
