// The CUDA GEMM at its edges, against the CPU GEMM: empty dimensions (N = 0, M = 0, K = 0) through
// every backend (cuBLASLt, loom's mma kernel, loom's WMMA kernel), a bias and a pre-activation at
// odd offsets on cuBLASLt, a D taller than one grid of WMMA row tiles, and loom's GEMM asking the
// driver for the device's limits only once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "loom/core/device_calls.hpp"
#include "loom/kernels/gemm.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Tensor;
using loom::kernels::Activation;
using loom::kernels::GemmBackend;
using loom::kernels::GemmOptions;
using loom::kernels::GemmPrecision;
using loom::kernels::StridedMatrix;

namespace {

const Device gpu = Device::cuda(0);

DType input_of(GemmPrecision p) {
  return p == GemmPrecision::bf16 ? DType::bf16 : p == GemmPrecision::fp16 ? DType::f16 : DType::f32;
}

// A [rows, cols] operand in a buffer with `pad` extra elements per row (3: 16-bit rows unaligned,
// loom's WMMA kernel; 0 with cols a multiple of 8: aligned, the mma kernel).
StridedMatrix operand(std::int64_t rows, std::int64_t cols, std::int64_t pad, DType dtype, std::mt19937& rng) {
  StridedMatrix m = StridedMatrix::of(loom::test::random_tensor({rows, std::max<std::int64_t>(cols + pad, 1)}, dtype, rng).tensor);
  m.cols = cols;
  return m;
}

// The padding that keeps a row of `cols` elements 16-byte aligned or not (an empty row is given 8
// elements of room: ld 8, 16 bytes of 16-bit elements).
std::int64_t pad_for(std::int64_t cols, bool aligned) { return aligned ? (cols == 0 ? 8 : 0) : 3; }

StridedMatrix on_gpu(const StridedMatrix& m) {
  StridedMatrix g = m;
  g.tensor = m.tensor.to(gpu);
  return g;
}

}  // namespace

TEST_CASE("CUDA GEMM with N = 0, M = 0 or K = 0 gives the CPU's D, pre-activation and bias gradient on every backend",
          "[cuda][gemm]") {
  std::mt19937 rng(91);
  struct Shape3 {
    std::int64_t m, n, k;
  };
  struct Path {
    GemmBackend backend;
    bool aligned;  // rows 16-byte aligned: the mma kernel; not: the WMMA kernel
  };
  for (const Shape3 s : {Shape3{37, 0, 24}, Shape3{0, 24, 16}, Shape3{37, 24, 0}}) {
    for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::tf32, GemmPrecision::bf16, GemmPrecision::fp16}) {
      std::vector<Path> paths = {{GemmBackend::cublaslt, true}};
      if (precision != GemmPrecision::fp32) paths.push_back({GemmBackend::loom, true});
      if (precision == GemmPrecision::bf16 || precision == GemmPrecision::fp16) paths.push_back({GemmBackend::loom, false});
      for (const Path path : paths) {
        INFO(s.m << " x " << s.n << " x " << s.k << " " << loom::kernels::to_string(precision) << " backend "
                 << static_cast<int>(path.backend) << " aligned rows " << path.aligned);
        const DType input = input_of(precision);
        const StridedMatrix a = operand(s.m, s.k, pad_for(s.k, path.aligned), input, rng),
                            b = operand(s.k, s.n, pad_for(s.n, path.aligned), input, rng);
        const Tensor c = loom::test::random_tensor({s.m, s.n}, DType::f32, rng).tensor;
        GemmOptions options;
        options.precision = precision;
        options.alpha = 0.5f, options.beta = 2.0f;
        options.epilogue.bias = loom::test::random_tensor({s.n}, DType::f32, rng).tensor;
        options.epilogue.activation = Activation::gelu;
        options.epilogue.pre_activation = Tensor::zeros({s.m, s.n}, DType::f32);
        options.epilogue.bias_grad = Tensor::zeros({s.m}, DType::f32);
        const Tensor d = c.clone();
        loom::kernels::gemm(a, b, StridedMatrix::of(d), StridedMatrix::of(d), options);

        GemmOptions g = options;
        g.backend = path.backend;
        g.epilogue.bias = options.epilogue.bias.to(gpu);
        g.epilogue.pre_activation = Tensor::empty({s.m, s.n}, DType::f32, gpu);
        g.epilogue.bias_grad = Tensor::empty({s.m}, DType::f32, gpu);
        loom::test::poison(g.epilogue.pre_activation);
        loom::test::poison(g.epilogue.bias_grad);  // N = 0 must still write it: the sums of A's rows
        const Tensor d_gpu = c.to(gpu);
        loom::kernels::gemm(on_gpu(a), on_gpu(b), StridedMatrix::of(d_gpu), StridedMatrix::of(d_gpu), g);
        loom::test::require_close(d_gpu.to(Device::cpu()), loom::test::as_doubles(d), 1e-5, 1e-5);
        loom::test::require_close(g.epilogue.pre_activation.to(Device::cpu()),
                                  loom::test::as_doubles(options.epilogue.pre_activation), 1e-5, 1e-5);
        loom::test::require_close(g.epilogue.bias_grad.to(Device::cpu()),
                                  loom::test::as_doubles(options.epilogue.bias_grad), 1e-5, 1e-5);
      }
    }
  }
}

TEST_CASE("cuBLASLt GEMM with a bias and a pre-activation at odd offsets matches the CPU", "[cuda][gemm]") {
  std::mt19937 rng(92);
  const std::int64_t m = 64, n = 96, k = 64;  // N and M x N multiples of 8: cuBLASLt would fuse the aux
  for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::bf16}) {
    INFO(loom::kernels::to_string(precision));
    const DType input = input_of(precision);
    const StridedMatrix a = operand(m, k, 0, input, rng), b = operand(k, n, 0, input, rng);
    // Views one element into larger buffers: 2 or 4 bytes past an aligned address.
    const Tensor bias_buffer = loom::test::random_tensor({n + 1}, input, rng).tensor;
    GemmOptions options;
    options.precision = precision;
    options.epilogue.bias = bias_buffer.slice(1, n + 1);
    options.epilogue.activation = Activation::gelu;
    options.epilogue.pre_activation = Tensor::zeros({m * n}, DType::f32);
    const Tensor d = Tensor::zeros({m, n}, DType::f32);
    loom::kernels::gemm(a, b, StridedMatrix::of(d), StridedMatrix::of(d), options);

    GemmOptions g = options;
    g.backend = GemmBackend::cublaslt;
    const Tensor bias_gpu = bias_buffer.to(gpu), pre_gpu = Tensor::empty({m * n + 1}, DType::f32, gpu);
    loom::test::poison(pre_gpu);
    g.epilogue.bias = bias_gpu.slice(1, n + 1);
    g.epilogue.pre_activation = pre_gpu.slice(1, m * n + 1);
    const Tensor d_gpu = Tensor::empty({m, n}, DType::f32, gpu);
    loom::kernels::gemm(on_gpu(a), on_gpu(b), StridedMatrix::of(d_gpu), StridedMatrix::of(d_gpu), g);
    const double rel = precision == GemmPrecision::fp32 ? 1e-5 : 2e-3;
    loom::test::require_close(d_gpu.to(Device::cpu()), loom::test::as_doubles(d), rel, rel * 8);
    loom::test::require_close(g.epilogue.pre_activation.to(Device::cpu()),
                              loom::test::as_doubles(options.epilogue.pre_activation), rel, rel * 8);
  }
}

TEST_CASE("loom's WMMA GEMM covers a D taller than one grid of row tiles (M > 65535 x 128)", "[cuda][gemm]") {
  std::mt19937 rng(93);
  const std::int64_t m = 65535 * 128 + 300, n = 4, k = 2;  // 16-bit rows of 5 elements: unaligned, WMMA
  const StridedMatrix a = operand(m, k, 3, DType::bf16, rng), b = operand(k, n, 3, DType::bf16, rng);
  GemmOptions options;
  options.precision = GemmPrecision::bf16;
  options.backend = GemmBackend::loom;
  const Tensor d_gpu = Tensor::empty({m, n}, DType::f32, gpu);
  loom::test::poison(d_gpu);
  loom::kernels::gemm(on_gpu(a), on_gpu(b), StridedMatrix::of(d_gpu), StridedMatrix::of(d_gpu), options);
  const Tensor d = d_gpu.to(Device::cpu());
  // The CPU's rows at the start, across the first launch's end and at the end of the second.
  for (std::int64_t first : {std::int64_t{0}, std::int64_t{65535 * 128 - 64}, m - 300}) {
    INFO("rows from " << first);
    StridedMatrix rows = a;
    rows.tensor = a.tensor.slice(first, first + 256);
    rows.rows = 256;
    const Tensor want = Tensor::zeros({256, n}, DType::f32);
    loom::kernels::gemm(rows, b, StridedMatrix::of(want), StridedMatrix::of(want), options);
    loom::test::require_close(d.slice(first, first + 256), loom::test::as_doubles(want), 2e-3, 2e-2);
  }
}

TEST_CASE("loom's GEMM asks the driver for the device's limits once, not at every call", "[cuda][gemm]") {
  std::mt19937 rng(94);
  const StridedMatrix a = on_gpu(operand(256, 64, 0, DType::bf16, rng)), b = on_gpu(operand(64, 128, 0, DType::bf16, rng));
  GemmOptions options;
  options.precision = GemmPrecision::bf16;
  options.backend = GemmBackend::loom;
  const Tensor d = Tensor::empty({256, 128}, DType::f32, gpu);
  loom::kernels::gemm(a, b, StridedMatrix::of(d), StridedMatrix::of(d), options);  // first use: queried
  const std::uint64_t before = loom::device_call_counts().attribute_queries;
  for (int i = 0; i < 5; ++i) loom::kernels::gemm(a, b, StridedMatrix::of(d), StridedMatrix::of(d), options);
  REQUIRE(loom::device_call_counts().attribute_queries == before);
}
