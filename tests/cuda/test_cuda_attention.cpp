// The fused CUDA attention against the fused CPU attention (itself checked against fp64 and the
// stored path in tests/unit), for every storage dtype and head sizes up to the kernel's limit,
// and its determinism: two runs give the same bits. f16/bf16 with head size 64 or 128 run the
// tensor-core kernels (attention_mma.cu), every other case the CUDA-core ones.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "loom/kernels/attention.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Tensor;
using loom::kernels::AttentionOptions;
using loom::kernels::GemmPrecision;

namespace {

const Device gpu = Device::cuda(0);

struct Outputs {
  Tensor out, lse, dqkv;
};

Outputs fused(const Tensor& qkv, const Tensor& dout, const AttentionOptions& options) {
  const Device device = qkv.device();
  const std::int64_t batch = qkv.size(0), steps = qkv.size(1), channels = qkv.size(2) / 3;
  Outputs o{Tensor::empty({batch, steps, channels}, qkv.dtype(), device),
            Tensor::empty({batch, options.num_heads, steps}, DType::f32, device),
            Tensor::empty(qkv.shape(), qkv.dtype(), device)};
  for (const Tensor& t : {o.out, o.lse, o.dqkv}) loom::test::poison(t);
  loom::kernels::fused_attention_forward(qkv, o.out, o.lse, options);
  loom::kernels::fused_attention_backward(dout, qkv, o.out, o.lse, o.dqkv, options);
  return o;
}

}  // namespace

TEST_CASE("CUDA fused attention matches the CPU fused attention and repeats its bits", "[cuda][attention][fused]") {
  std::mt19937 rng(84);
  struct Case {
    std::int64_t batch, steps, heads, head_size;
  };
  // Ragged tiles (T not a multiple of 16), head sizes below, at and above a warp, the maximum;
  // for the tensor-core kernels (64-row tiles, 32-query steps in dK/dV) T below one tile, whole
  // tiles, and several ragged ones.
  for (const Case c : {Case{2, 70, 4, 24}, Case{1, 33, 2, 64}, Case{2, 128, 3, 128}, Case{3, 5, 1, 8},
                       Case{2, 300, 2, 64}, Case{1, 200, 2, 128}}) {
    for (auto [precision, dtype, rel] : std::vector<std::tuple<GemmPrecision, DType, double>>{
             {GemmPrecision::fp32, DType::f32, 2e-5}, {GemmPrecision::bf16, DType::bf16, 2e-2},
             {GemmPrecision::fp16, DType::f16, 3e-3}}) {
      INFO("T = " << c.steps << ", heads = " << c.heads << ", hs = " << c.head_size << ", "
                  << loom::kernels::to_string(precision));
      const std::int64_t channels = c.heads * c.head_size;
      const AttentionOptions options{c.heads, precision};
      const auto qkv = loom::test::random_tensor({c.batch, c.steps, 3 * channels}, dtype, rng, 2.0);
      const auto dout = loom::test::random_tensor({c.batch, c.steps, channels}, dtype, rng);
      const Outputs cpu = fused(qkv.tensor, dout.tensor, options);
      const Outputs first = fused(qkv.tensor.to(gpu), dout.tensor.to(gpu), options);
      const Outputs second = fused(qkv.tensor.to(gpu), dout.tensor.to(gpu), options);
      loom::test::require_close(first.out.to(Device::cpu()), loom::test::as_doubles(cpu.out), rel, rel);
      loom::test::require_close(first.lse.to(Device::cpu()), loom::test::as_doubles(cpu.lse), 1e-5, 1e-5);
      loom::test::require_close(first.dqkv.to(Device::cpu()), loom::test::as_doubles(cpu.dqkv), 5 * rel, 5 * rel);
      for (auto [a, b] : {std::pair{first.out, second.out}, {first.lse, second.lse}, {first.dqkv, second.dqkv}}) {
        REQUIRE(loom::test::as_doubles(a.to(Device::cpu())) == loom::test::as_doubles(b.to(Device::cpu())));
      }
    }
  }
}

TEST_CASE("CUDA fused attention refuses head sizes above 128 by name", "[cuda][attention][fused]") {
  const Tensor qkv = Tensor::zeros({1, 4, 3 * 256}, DType::f32, gpu), out = Tensor::empty({1, 4, 256}, DType::f32, gpu);
  const Tensor lse = Tensor::empty({1, 1, 4}, DType::f32, gpu);
  CHECK_THROWS_MATCHES(loom::kernels::fused_attention_forward(qkv, out, lse, AttentionOptions{1, GemmPrecision::fp32}),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"head size 256", "128"}));
}

TEST_CASE("CUDA split_heads and merge_heads move 1- and 8-byte elements one by one", "[cuda][attention]") {
  // Unaligned rows (hs = 5 bytes, 3 x 8 bytes) take the per-element path, with the element's size.
  const std::int64_t groups = 3, batch = 2, heads = 2, steps = 7;
  auto check = [&]<class T>(std::int64_t head_size) {
    std::vector<T> values(static_cast<std::size_t>(batch * steps * groups * heads * head_size));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<T>(i * 7 + 1);
    const Tensor x = Tensor::from_vector(values, {batch, steps, groups * heads * head_size});
    const Tensor cpu_heads = Tensor::empty({groups, batch, heads, steps, head_size}, x.dtype());
    loom::kernels::split_heads(x, cpu_heads, heads);
    const Tensor gpu_heads = Tensor::zeros(cpu_heads.shape(), x.dtype(), gpu), back = Tensor::zeros(x.shape(), x.dtype(), gpu);
    loom::kernels::split_heads(x.to(gpu), gpu_heads, heads);
    REQUIRE(gpu_heads.to(Device::cpu()).to_vector<T>() == cpu_heads.to_vector<T>());
    loom::kernels::merge_heads(gpu_heads, back, heads);
    REQUIRE(back.to(Device::cpu()).to_vector<T>() == values);
  };
  check.operator()<std::uint8_t>(5);
  check.operator()<std::int64_t>(3);
}
