// The CUDA GEMM (cuBLASLt and loom's own kernels) and attention against the CPU implementations (which tests/unit checks
// against fp64), over precisions, output dtypes, transposes, broadcast batches, padded leading
// dimensions, alpha/beta and epilogues.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "loom/kernels/attention.hpp"
#include "loom/kernels/gemm.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Tensor;
using loom::kernels::Activation;
using loom::kernels::GemmOptions;
using loom::kernels::GemmPrecision;
using loom::kernels::StridedMatrix;

namespace {

const Device gpu = Device::cuda(0);

DType input_of(GemmPrecision p) {
  return p == GemmPrecision::bf16 ? DType::bf16 : p == GemmPrecision::fp16 ? DType::f16 : DType::f32;
}

// Relative agreement expected between two correct implementations of a precision.
double agreement(GemmPrecision p, DType output) {
  double rel = p == GemmPrecision::fp32 ? 1e-5 : 2e-3;  // tf32/fp16/bf16: rounding and order differences
  if (output != DType::f32) rel = std::max(rel, 2 * loom::test::ulp_of(output));
  return rel;
}

// The same strided operand on the GPU.
StridedMatrix on_gpu(const StridedMatrix& m) {
  StridedMatrix g = m;
  g.tensor = m.tensor.to(gpu);
  return g;
}

// Row padding: 3 elements leaves the rows of 16-bit operands unaligned (loom's WMMA kernel),
// padding to a multiple of 8 elements aligns them to 16 bytes (loom's cp.async mma kernel).
std::int64_t padding(std::int64_t cols, bool aligned_rows) { return aligned_rows ? (8 - cols % 8) % 8 + 8 : 3; }

StridedMatrix padded(const Tensor& t, std::int64_t cols) {
  StridedMatrix m = StridedMatrix::of(t);
  m.cols = cols;
  return m;
}

}  // namespace

TEST_CASE("CUDA GEMM matches the CPU GEMM over precisions, layouts and epilogues", "[cuda][gemm]") {
  std::mt19937 rng(81);
  const std::int64_t batch = 3, k = 129;
  // 197 x 269 spans several 128 x 128 blocks with ragged edges (N odd: cuBLASLt cannot keep the
  // pre-activation itself); 64 x 96 lets it (N and M*N multiples of 8).
  for (auto [m, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{{197, 269}, {64, 96}})
  for (auto [precision, output] : std::vector<std::pair<GemmPrecision, DType>>{
           {GemmPrecision::fp32, DType::f32}, {GemmPrecision::tf32, DType::f32}, {GemmPrecision::bf16, DType::bf16},
           {GemmPrecision::bf16, DType::f32}, {GemmPrecision::fp16, DType::f16}}) {
  for (bool aligned_rows : {false, true}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        for (int epilogue = 0; epilogue < 3; ++epilogue) {  // none; bias + alpha/beta; bias + GELU with aux
          INFO(m << " x " << n << " " << loom::kernels::to_string(precision) << " -> " << loom::dtype_name(output)
                 << " ta=" << trans_a << " tb=" << trans_b << " epilogue=" << epilogue << " aligned=" << aligned_rows);
          const DType input = input_of(precision);
          const std::int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
          const auto a = loom::test::random_tensor(
              {batch, trans_a ? k : m, a_cols + padding(a_cols, aligned_rows)}, input, rng);
          const auto b = loom::test::random_tensor(  // one B for every batch
              {1, trans_b ? n : k, b_cols + padding(b_cols, aligned_rows)}, input, rng);
          const auto c = loom::test::random_tensor({batch, m, n}, output, rng);
          const auto bias = loom::test::random_tensor({n}, input, rng);
          const StridedMatrix am = padded(a.tensor, a_cols), bm = padded(b.tensor, b_cols);
          GemmOptions options;
          options.trans_a = trans_a, options.trans_b = trans_b, options.precision = precision;
          if (epilogue >= 1) options.epilogue.bias = bias.tensor, options.alpha = 0.5f, options.beta = epilogue == 1 ? 2.0f : 0.0f;
          if (epilogue == 2) options.epilogue.activation = Activation::gelu;

          const Tensor d_cpu = c.tensor.clone();
          GemmOptions cpu_options = options;
          if (epilogue == 2) cpu_options.epilogue.pre_activation = Tensor::empty({batch, m, n}, output);
          loom::kernels::gemm(am, bm, StridedMatrix::of(d_cpu), StridedMatrix::of(d_cpu), cpu_options);

          std::vector<loom::kernels::GemmBackend> backends = {loom::kernels::GemmBackend::automatic};
          if (precision != GemmPrecision::fp32) {
            backends.push_back(loom::kernels::GemmBackend::loom);
          }
          for (auto backend : backends) {
            INFO("backend " << static_cast<int>(backend));
            const Tensor d_gpu = c.tensor.to(gpu);
            GemmOptions gpu_options = options;
            gpu_options.backend = backend;
            gpu_options.epilogue.bias = options.epilogue.bias.defined() ? bias.tensor.to(gpu) : Tensor();
            if (epilogue == 2) {
              gpu_options.epilogue.pre_activation = Tensor::empty({batch, m, n}, output, gpu);
              loom::test::poison(gpu_options.epilogue.pre_activation);
            }
            loom::kernels::gemm(on_gpu(am), on_gpu(bm), StridedMatrix::of(d_gpu), StridedMatrix::of(d_gpu), gpu_options);
            const double rel = agreement(precision, output), abs = rel * std::sqrt(static_cast<double>(k));
            loom::test::require_close(d_gpu.to(Device::cpu()), loom::test::as_doubles(d_cpu), rel, abs);
            if (epilogue == 2) {
              loom::test::require_close(gpu_options.epilogue.pre_activation.to(Device::cpu()),
                                        loom::test::as_doubles(cpu_options.epilogue.pre_activation), rel, abs);
            }
          }
        }
      }
    }
  }
  }
}

TEST_CASE("loom's own CUDA GEMM at pipeline edges: K shorter than the prefetch, whole tiles, broadcast A",
          "[cuda][gemm]") {
  std::mt19937 rng(82);
  const std::int64_t batch = 2, m = 128, n = 256;
  for (std::int64_t k : {1, 8, 40})
  for (GemmPrecision precision : {GemmPrecision::tf32, GemmPrecision::bf16, GemmPrecision::fp16}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        INFO("k=" << k << " " << loom::kernels::to_string(precision) << " ta=" << trans_a << " tb=" << trans_b);
        const DType input = input_of(precision);
        // A is one matrix for every batch (batch stride 0); B has one per batch.
        const auto a = loom::test::random_tensor({1, trans_a ? k : m, trans_a ? m : k}, input, rng);
        const auto b = loom::test::random_tensor({batch, trans_b ? n : k, trans_b ? k : n}, input, rng);
        const auto bias = loom::test::random_tensor({n}, input, rng);
        GemmOptions options;
        options.trans_a = trans_a, options.trans_b = trans_b, options.precision = precision;
        options.epilogue.bias = bias.tensor;
        const Tensor d_cpu = Tensor::empty({batch, m, n}, DType::f32);
        loom::kernels::gemm(StridedMatrix::of(a.tensor), StridedMatrix::of(b.tensor), StridedMatrix::of(d_cpu),
                            StridedMatrix::of(d_cpu), options);
        const Tensor d_gpu = Tensor::empty({batch, m, n}, DType::f32, gpu);
        loom::test::poison(d_gpu);
        GemmOptions gpu_options = options;
        gpu_options.backend = loom::kernels::GemmBackend::loom;
        gpu_options.epilogue.bias = bias.tensor.to(gpu);
        loom::kernels::gemm(on_gpu(StridedMatrix::of(a.tensor)), on_gpu(StridedMatrix::of(b.tensor)),
                            StridedMatrix::of(d_gpu), StridedMatrix::of(d_gpu), gpu_options);
        const double rel = agreement(precision, DType::f32);
        loom::test::require_close(d_gpu.to(Device::cpu()), loom::test::as_doubles(d_cpu), rel,
                                  rel * std::sqrt(static_cast<double>(k + 1)));
      }
    }
  }
}

TEST_CASE("loom's own CUDA GEMM with split-K (few output tiles, long K) matches the CPU and repeats its bits",
          "[cuda][gemm]") {
  // Weight-gradient shapes: dW = dY^T X with K = tokens. Few 128 x 128 tiles and a long K make the
  // kernel split K and add the splits in a second kernel; D += (beta = 1, as gradient accumulation
  // does), bias and GELU go through that second kernel. N = 300 leaves rows unaligned for 16-byte
  // stores (element by element), N = 320 aligned.
  std::mt19937 rng(84);
  for (auto [m, n, k] : std::vector<std::array<std::int64_t, 3>>{{256, 320, 4096}, {200, 300, 3000}, {64, 64, 1024}})
  for (auto [precision, output] : std::vector<std::pair<GemmPrecision, DType>>{
           {GemmPrecision::bf16, DType::f32}, {GemmPrecision::bf16, DType::bf16}, {GemmPrecision::tf32, DType::f32},
           {GemmPrecision::fp16, DType::f16}}) {
    for (int epilogue = 0; epilogue < 2; ++epilogue) {  // beta = 1 accumulation; bias + GELU
      INFO(m << " x " << n << " x " << k << " " << loom::kernels::to_string(precision) << " -> "
             << loom::dtype_name(output) << " epilogue=" << epilogue);
      const DType input = input_of(precision);
      const auto a = loom::test::random_tensor({k, m}, input, rng);  // dY, used transposed
      const auto b = loom::test::random_tensor({k, n}, input, rng);  // X
      const auto c = loom::test::random_tensor({m, n}, output, rng);
      const auto bias = loom::test::random_tensor({n}, input, rng);
      GemmOptions options;
      options.trans_a = true, options.precision = precision;
      if (epilogue == 0) options.beta = 1.0f;
      if (epilogue == 1) options.epilogue.bias = bias.tensor, options.epilogue.activation = Activation::gelu;
      const Tensor d_cpu = c.tensor.clone();
      loom::kernels::gemm(a.tensor, b.tensor, d_cpu, options);
      GemmOptions gpu_options = options;
      gpu_options.backend = loom::kernels::GemmBackend::loom;
      if (epilogue == 1) gpu_options.epilogue.bias = bias.tensor.to(gpu);
      std::vector<double> first;
      for (int run = 0; run < 2; ++run) {
        const Tensor d_gpu = c.tensor.to(gpu);
        loom::kernels::gemm(a.tensor.to(gpu), b.tensor.to(gpu), d_gpu, gpu_options);
        const auto got = loom::test::as_doubles(d_gpu.to(Device::cpu()));
        if (run == 0) {
          const double rel = agreement(precision, output);
          loom::test::require_close(d_gpu.to(Device::cpu()), loom::test::as_doubles(d_cpu), rel,
                                    rel * std::sqrt(static_cast<double>(k)));
          first = got;
        } else {
          REQUIRE(got == first);  // splits are added in a fixed order
        }
      }
    }
  }
}

TEST_CASE("CUDA GEMM bias gradient matches the CPU and repeats its bits", "[cuda][gemm]") {
  std::mt19937 rng(82);
  // dW = dY^T X with dY [tokens, out], X [tokens, in]; bias_grad = column sums of dY (A transposed,
  // the training case, with token counts below, at and far above one chunk of rows); and row sums
  // of a plain A.
  struct Case {
    std::int64_t tokens, out;
    bool trans_a;
  };
  for (const Case c : {Case{300, 96, true}, Case{64, 33, true}, Case{8192, 768, true}, Case{300, 96, false}}) {
    INFO("tokens = " << c.tokens << ", out = " << c.out << ", trans_a = " << c.trans_a);
    const auto dy = loom::test::random_tensor(c.trans_a ? loom::Shape{c.tokens, c.out} : loom::Shape{c.out, c.tokens},
                                              DType::bf16, rng);
    const auto x = loom::test::random_tensor({c.tokens, 64}, DType::bf16, rng);
    GemmOptions options;
    options.trans_a = c.trans_a, options.precision = GemmPrecision::bf16;
    options.epilogue.bias_grad = Tensor::empty({c.out}, DType::f32);
    const Tensor dw = Tensor::empty({c.out, 64}, DType::f32);
    loom::kernels::gemm(dy.tensor, x.tensor, dw, options);
    std::vector<double> first;
    for (int run = 0; run < 2; ++run) {
      GemmOptions gpu_options = options;
      gpu_options.epilogue.bias_grad = Tensor::empty({c.out}, DType::f32, gpu);
      loom::test::poison(gpu_options.epilogue.bias_grad);
      const Tensor dw_gpu = Tensor::empty({c.out, 64}, DType::f32, gpu);
      loom::kernels::gemm(dy.tensor.to(gpu), x.tensor.to(gpu), dw_gpu, gpu_options);
      const double k = static_cast<double>(c.tokens);
      loom::test::require_close(dw_gpu.to(Device::cpu()), loom::test::as_doubles(dw), 2e-3, 2e-3 * std::sqrt(k));
      loom::test::require_close(gpu_options.epilogue.bias_grad.to(Device::cpu()),
                                loom::test::as_doubles(options.epilogue.bias_grad), 1e-5, 1e-6 * std::sqrt(k));
      const std::vector<double> got = loom::test::as_doubles(gpu_options.epilogue.bias_grad.to(Device::cpu()));
      if (run == 0) first = got;
      else REQUIRE(got == first);
    }
  }
}

TEST_CASE("CUDA attention forward and backward match the CPU", "[cuda][attention]") {
  std::mt19937 rng(83);
  const std::int64_t batch = 2, steps = 70, channels = 96, heads = 4;
  for (auto [precision, dtype] : std::vector<std::pair<GemmPrecision, DType>>{{GemmPrecision::fp32, DType::f32},
                                                                              {GemmPrecision::bf16, DType::bf16}}) {
  for (auto path : {loom::kernels::AttentionPath::automatic, loom::kernels::AttentionPath::composed}) {
    INFO(loom::kernels::to_string(precision) << (path == loom::kernels::AttentionPath::composed ? " composed" : " automatic (head-major)"));
    const loom::kernels::AttentionOptions options{heads, precision};
    loom::kernels::AttentionOptions gpu_options = options;
    gpu_options.path = path;
    const auto qkv = loom::test::random_tensor({batch, steps, 3 * channels}, dtype, rng);
    const auto dout = loom::test::random_tensor({batch, steps, channels}, dtype, rng);
    const Tensor out = Tensor::empty({batch, steps, channels}, dtype), att = Tensor::empty({batch, heads, steps, steps}, dtype);
    const Tensor dqkv = Tensor::empty({batch, steps, 3 * channels}, dtype);
    loom::kernels::attention_forward(qkv.tensor, out, att, options);
    loom::kernels::attention_backward(dout.tensor, qkv.tensor, att, dqkv, options);
    const Tensor g_out = Tensor::empty(out.shape(), dtype, gpu), g_att = Tensor::empty(att.shape(), dtype, gpu),
                 g_dqkv = Tensor::empty(dqkv.shape(), dtype, gpu);
    for (const Tensor& t : {g_out, g_att, g_dqkv}) loom::test::poison(t);
    loom::kernels::attention_forward(qkv.tensor.to(gpu), g_out, g_att, gpu_options);
    loom::kernels::attention_backward(dout.tensor.to(gpu), qkv.tensor.to(gpu), g_att, g_dqkv, gpu_options);
    const double rel = agreement(precision, dtype);
    loom::test::require_close(g_out.to(Device::cpu()), loom::test::as_doubles(out), rel, rel);
    loom::test::require_close(g_att.to(Device::cpu()), loom::test::as_doubles(att), rel, rel);
    loom::test::require_close(g_dqkv.to(Device::cpu()), loom::test::as_doubles(dqkv), 5 * rel, 5 * rel);
  }
  }
}

TEST_CASE("CUDA split_heads and merge_heads move the CPU's bits", "[cuda][attention]") {
  // Head size 8 in bf16 and 4 in f32: 16-byte rows (vector copies); 5 in bf16: element copies.
  std::mt19937 rng(85);
  for (auto [dtype, head_size] : std::vector<std::pair<DType, std::int64_t>>{{DType::bf16, 8}, {DType::f32, 4}, {DType::bf16, 5}}) {
    INFO(loom::dtype_name(dtype) << " hs=" << head_size);
    const std::int64_t groups = 3, batch = 2, heads = 3, steps = 17;
    const auto x = loom::test::random_tensor({batch, steps, groups * heads * head_size}, dtype, rng);
    const Tensor cpu_heads = Tensor::empty({groups, batch, heads, steps, head_size}, dtype);
    loom::kernels::split_heads(x.tensor, cpu_heads, heads);
    const Tensor gpu_heads = Tensor::empty(cpu_heads.shape(), dtype, gpu), back = Tensor::empty(x.tensor.shape(), dtype, gpu);
    loom::test::poison(gpu_heads);
    loom::test::poison(back);
    loom::kernels::split_heads(x.tensor.to(gpu), gpu_heads, heads);
    REQUIRE(loom::test::as_doubles(gpu_heads.to(Device::cpu())) == loom::test::as_doubles(cpu_heads));
    loom::kernels::merge_heads(gpu_heads, back, heads);
    REQUIRE(loom::test::as_doubles(back.to(Device::cpu())) == x.values);
  }
}
