// Tensors on a GPU: copies in every direction and fills, checked element by element on the host.
#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Tensor;

namespace {
const Device gpu = Device::cuda(0);

// A CPU tensor of dtype whose bytes are 0, 1, 2, ... (mod 251): distinct, non-trivial content.
Tensor patterned(const loom::Shape& shape, DType dtype) {
  const Tensor t = Tensor::empty(shape, dtype);
  auto bytes = t.as_bytes().span<std::uint8_t>();
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i % 251);
  return t;
}
}  // namespace

TEST_CASE("host -> device -> device -> host round trips every dtype and odd sizes", "[cuda][tensor]") {
  for (DType dtype : loom::all_dtypes) {
    for (std::int64_t n : {1, 7, 1000, 1 << 20}) {
      INFO(loom::dtype_name(dtype) << " x " << n);
      const Tensor host = patterned({n}, dtype);
      const Tensor on_gpu = host.to(gpu);
      CHECK(on_gpu.device() == gpu);
      const Tensor second = Tensor::empty({n}, dtype, gpu);
      loom::test::poison(second);
      loom::copy(second, on_gpu);
      const Tensor back = Tensor::empty({n}, dtype);
      loom::test::poison(back);
      loom::copy(back, second);
      REQUIRE(back.as_bytes().to_vector<std::uint8_t>() == host.as_bytes().to_vector<std::uint8_t>());
    }
  }
}

TEST_CASE("device fill writes the same bits as the CPU fill, for every dtype", "[cuda][tensor]") {
  const double values[] = {0.0, 1.0, 0.1, -3.5, 200.0};
  for (DType dtype : loom::all_dtypes) {
    for (double value : values) {
      if (!loom::is_floating_point(dtype) && (value != static_cast<std::int64_t>(value) || value < 0)) continue;
      INFO(loom::dtype_name(dtype) << " <- " << value);
      const Tensor expected = Tensor::full({333}, dtype, value);
      const Tensor got = Tensor::empty({333}, dtype, gpu);
      loom::test::poison(got);
      loom::fill(got, value);
      REQUIRE(got.as_bytes().to_vector<std::uint8_t>() == expected.as_bytes().to_vector<std::uint8_t>());
    }
  }
}

TEST_CASE("slices of device tensors copy and fill only their rows", "[cuda][tensor]") {
  const Tensor t = Tensor::zeros({4, 3}, DType::f32, gpu);
  loom::fill(t.slice(1, 3), 2.0);
  loom::copy(t.slice(3, 4), Tensor::from_vector(std::vector<float>{7, 8, 9}, {1, 3}));
  CHECK(t.to_vector<float>() == std::vector<float>{0, 0, 0, 2, 2, 2, 2, 2, 2, 7, 8, 9});
  CHECK(t.select(3).slice(1, 2).item<float>() == 8.0f);
}

TEST_CASE("copies and fills enqueued on a stream are complete after synchronize", "[cuda][tensor][stream]") {
  loom::Stream stream(gpu);
  const std::int64_t n = 1 << 22;
  const Tensor host = patterned({n}, DType::f32);
  const Tensor device = Tensor::empty({n}, DType::f32, gpu);
  const Tensor filled = Tensor::empty({n}, DType::bf16, gpu);
  const Tensor back = Tensor::empty({n}, DType::f32);
  loom::test::poison(device);
  loom::test::poison(filled);
  loom::test::poison(back);
  loom::copy(device, host, stream);
  loom::fill(filled, 0.5, stream);
  loom::copy(back, device, stream);
  stream.synchronize();
  CHECK(back.as_bytes().to_vector<std::uint8_t>() == host.as_bytes().to_vector<std::uint8_t>());
  for (loom::bfloat16 v : filled.to_vector<loom::bfloat16>()) REQUIRE(v.bits == loom::float_to_bf16_bits(0.5f));
}

TEST_CASE("host element access to a device tensor is refused", "[cuda][tensor]") {
  const Tensor t = Tensor::zeros({2}, DType::f32, gpu);
  CHECK_THROWS_MATCHES(t.span<float>(), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"cuda:0", "to(Device::cpu())"}));
  CHECK(t.data<float>() != nullptr);  // a device pointer is fine to hand to kernels
}
