// Every CUDA training kernel against the CPU kernel on the same inputs (the CPU kernels are
// themselves checked against fp64 in tests/unit). Outputs on the GPU are poisoned first.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/cast.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/embedding.hpp"
#include "loom/kernels/grad_utils.hpp"
#include "loom/kernels/layernorm.hpp"
#include "loom/kernels/optimizer.hpp"
#include "loom/kernels/softmax.hpp"
#include "loom/kernels/vocab_parallel.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::Device;
using loom::DType;
using loom::Tensor;

namespace {

const Device gpu = Device::cuda(0);

// A poisoned GPU tensor shaped like t.
Tensor gpu_like(const Tensor& t) {
  const Tensor out = Tensor::empty(t.shape(), t.dtype(), gpu);
  loom::test::poison(out);
  return out;
}

// The GPU result equals the CPU result within tolerance (relative to the CPU value).
void require_matches(const Tensor& gpu_result, const Tensor& cpu_result, double rel, double abs) {
  loom::test::require_close(gpu_result.to(Device::cpu()), loom::test::as_doubles(cpu_result), rel, abs);
}

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : 2 * loom::test::ulp_of(dtype); }

// A position embedding's gradient against fp64: got[t] = initial[t] + the sum over b of dout[b, t]
// for t < T (dout is [B, T, C]), initial[t] beyond. Any order of those B fp32 additions is within
// B u (|initial| + sum |dout|) of the exact sum (u = 2^-24): the CPU adds in turn, the GPU sums the
// batch first, and neither is the other's reference when the terms cancel.
void require_batch_sum(const Tensor& got, const Tensor& initial, const Tensor& dout) {
  const std::vector<double> g = loom::test::as_doubles(got.to(Device::cpu())), start = loom::test::as_doubles(initial),
                            d = loom::test::as_doubles(dout);
  const std::int64_t batch = dout.size(0), steps = dout.size(1), channels = dout.size(2);
  REQUIRE(static_cast<std::int64_t>(g.size()) == initial.numel());
  for (std::int64_t i = 0; i < initial.numel(); ++i) {
    const std::int64_t t = i / channels, c = i % channels;
    double exact = start[i], magnitude = std::fabs(start[i]);
    for (std::int64_t b = 0; t < steps && b < batch; ++b) {
      const double x = d[(b * steps + t) * channels + c];
      exact += x;
      magnitude += std::fabs(x);
    }
    INFO("element " << i << ": got " << g[i] << ", exact " << exact);
    REQUIRE(std::fabs(g[i] - exact) <= 1.001 * static_cast<double>(batch) * 0x1p-24 * magnitude);
  }
}

const DType floating[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("CUDA elementwise kernels and casts match the CPU", "[cuda][kernels]") {
  std::mt19937 rng(71);
  for (DType dtype : floating) {
    INFO(loom::dtype_name(dtype));
    const auto x = loom::test::random_tensor({3, 1001}, dtype, rng, 4.0), y = loom::test::random_tensor({3, 1001}, dtype, rng);
    const Tensor cpu_out = Tensor::empty({3, 1001}, dtype), gx = x.tensor.to(gpu), gy = y.tensor.to(gpu);
    Tensor out = gpu_like(cpu_out);
    loom::kernels::gelu_forward(x.tensor, cpu_out);
    loom::kernels::gelu_forward(gx, out);
    require_matches(out, cpu_out, tolerance(dtype), 1e-6);
    loom::kernels::gelu_backward(x.tensor, y.tensor, cpu_out);
    loom::kernels::gelu_backward(gx, gy, out);
    require_matches(out, cpu_out, tolerance(dtype), 1e-6);
    loom::kernels::residual_add(x.tensor, y.tensor, cpu_out);
    loom::kernels::residual_add(gx, gy, out);
    require_matches(out, cpu_out, 0, 0);
    // Views one element in: not 16-byte aligned, so the kernels take their element-wise path.
    const Tensor x_view = x.tensor.flatten().slice(1, 3003), y_view = y.tensor.flatten().slice(1, 3003);
    const Tensor view_cpu = Tensor::empty({3002}, dtype), view_gpu = gpu_like(view_cpu);
    loom::kernels::gelu_backward(x_view, y_view, view_cpu);
    loom::kernels::gelu_backward(gx.flatten().slice(1, 3003), gy.flatten().slice(1, 3003), view_gpu);
    require_matches(view_gpu, view_cpu, tolerance(dtype), 1e-6);
    loom::kernels::residual_add(x_view, y_view, view_cpu);
    loom::kernels::residual_add(gx.flatten().slice(1, 3003), gy.flatten().slice(1, 3003), view_gpu);
    require_matches(view_gpu, view_cpu, tolerance(dtype), 1e-6);
    for (DType to : floating) {
      const Tensor cast_cpu = Tensor::empty({3, 1001}, to);
      const Tensor cast_gpu = gpu_like(cast_cpu);
      loom::kernels::cast(x.tensor, cast_cpu);
      loom::kernels::cast(gx, cast_gpu);
      require_matches(cast_gpu, cast_cpu, 0, 0);
    }
  }
  // Stochastic rounding draws the same bits on both devices.
  const auto master = loom::test::random_tensor({5000}, DType::f32, rng);
  loom::kernels::CastOptions sr;
  sr.rounding = loom::kernels::Rounding::stochastic;
  sr.seed = 7;
  sr.offset = 100;
  const Tensor cpu_bf16 = Tensor::empty({5000}, DType::bf16), gpu_bf16 = gpu_like(cpu_bf16);
  loom::kernels::cast(master.tensor, cpu_bf16, sr);
  loom::kernels::cast(master.tensor.to(gpu), gpu_bf16, sr);
  CHECK(gpu_bf16.to(Device::cpu()).as_bytes().to_vector<std::uint8_t>() == cpu_bf16.as_bytes().to_vector<std::uint8_t>());
}

TEST_CASE("CUDA layernorm forward and backward match the CPU", "[cuda][kernels]") {
  std::mt19937 rng(72);
  for (DType dtype : floating) {
    INFO(loom::dtype_name(dtype));
    const std::int64_t rows = 300, channels = 771;
    const auto x = loom::test::random_tensor({rows, channels}, dtype, rng, 3.0);
    const auto w = loom::test::random_tensor({channels}, dtype, rng), b = loom::test::random_tensor({channels}, dtype, rng);
    const auto dout = loom::test::random_tensor({rows, channels}, dtype, rng);
    const Tensor out = Tensor::empty({rows, channels}, dtype), mean = Tensor::empty({rows}, DType::f32),
                 rstd = Tensor::empty({rows}, DType::f32);
    loom::kernels::layernorm_forward(x.tensor, w.tensor, b.tensor, out, mean, rstd);
    const Tensor g_out = gpu_like(out), g_mean = gpu_like(mean), g_rstd = gpu_like(rstd);
    loom::kernels::layernorm_forward(x.tensor.to(gpu), w.tensor.to(gpu), b.tensor.to(gpu), g_out, g_mean, g_rstd);
    require_matches(g_out, out, tolerance(dtype), 1e-5);
    require_matches(g_mean, mean, 1e-5, 1e-6);
    require_matches(g_rstd, rstd, 1e-5, 1e-6);

    const Tensor dx = Tensor::empty({rows, channels}, dtype);
    const Tensor dw = Tensor::full({channels}, DType::f32, 0.5), db = Tensor::full({channels}, DType::f32, 0.5);
    const Tensor g_dx = gpu_like(dx), g_dw = dw.to(gpu), g_db = db.to(gpu);
    loom::kernels::layernorm_backward(dout.tensor, x.tensor, w.tensor, mean, rstd, dx, dw, db);
    loom::kernels::layernorm_backward(dout.tensor.to(gpu), x.tensor.to(gpu), w.tensor.to(gpu), mean.to(gpu),
                                      rstd.to(gpu), g_dx, g_dw, g_db);
    require_matches(g_dx, dx, tolerance(dtype), 1e-4);
    require_matches(g_dw, dw, 1e-4, 1e-4);
    require_matches(g_db, db, 1e-4, 1e-4);

    // With the residual's gradient: the GPU's layernorm_backward then residual_add, bit for bit (dx
    // itself is checked against the CPU above; the sum can cancel, so no relative check of it).
    const auto residual = loom::test::random_tensor({rows, channels}, dtype, rng);
    const Tensor g_fused = gpu_like(dx), g_sum = gpu_like(dx);
    const Tensor g_dw2 = dw.to(gpu), g_db2 = db.to(gpu);
    loom::kernels::layernorm_backward_residual(dout.tensor.to(gpu), x.tensor.to(gpu), w.tensor.to(gpu), mean.to(gpu),
                                               rstd.to(gpu), residual.tensor.to(gpu), g_fused, g_dw2, g_db2);
    loom::kernels::residual_add(residual.tensor.to(gpu), g_dx, g_sum);
    require_matches(g_fused, g_sum.to(Device::cpu()), 0, 0);
  }
}

TEST_CASE("CUDA residual_layernorm_forward equals the unfused GPU kernels bit for bit, and the CPU", "[cuda][kernels]") {
  std::mt19937 rng(73);
  for (DType dtype : floating) {
    INFO(loom::dtype_name(dtype));
    const auto a = loom::test::random_tensor({37, 768}, dtype, rng), b = loom::test::random_tensor({37, 768}, dtype, rng);
    const auto w = loom::test::random_tensor({768}, dtype, rng), bias = loom::test::random_tensor({768}, dtype, rng);
    const Tensor ga = a.tensor.to(gpu), gb = b.tensor.to(gpu), gw = w.tensor.to(gpu), gbias = bias.tensor.to(gpu);
    const Tensor sum = gpu_like(ga), out = gpu_like(ga), sum2 = gpu_like(ga), out2 = gpu_like(ga);
    const Tensor mean = Tensor::empty({37}, DType::f32, gpu), rstd = Tensor::empty({37}, DType::f32, gpu);
    const Tensor mean2 = Tensor::empty({37}, DType::f32, gpu), rstd2 = Tensor::empty({37}, DType::f32, gpu);
    loom::kernels::residual_layernorm_forward(ga, gb, sum, gw, gbias, out, mean, rstd);
    loom::kernels::residual_add(ga, gb, sum2);
    loom::kernels::layernorm_forward(sum2, gw, gbias, out2, mean2, rstd2);
    require_matches(sum, sum2.to(Device::cpu()), 0, 0);
    require_matches(out, out2.to(Device::cpu()), 0, 0);
    require_matches(mean, mean2.to(Device::cpu()), 0, 0);
    require_matches(rstd, rstd2.to(Device::cpu()), 0, 0);
    const Tensor cpu_sum = Tensor::empty({37, 768}, dtype), cpu_out = Tensor::empty({37, 768}, dtype);
    const Tensor cpu_mean = Tensor::empty({37}, DType::f32), cpu_rstd = Tensor::empty({37}, DType::f32);
    loom::kernels::residual_layernorm_forward(a.tensor, b.tensor, cpu_sum, w.tensor, bias.tensor, cpu_out, cpu_mean,
                                              cpu_rstd);
    require_matches(out, cpu_out, tolerance(dtype), 1e-5);
  }
}

TEST_CASE("CUDA row kernels give the same bits from aligned rows (16-byte accesses) and unaligned ones",
          "[cuda][kernels]") {
  // Views one element into their buffers leave every row unaligned, so LayerNorm, softmax and
  // cross-entropy move element by element there; each thread owns the same elements in the same
  // order either way. 2056 channels are 257 chunks of 8: the first thread of a 256-thread block
  // owns two; causal rows of 264 and a vocabulary of 2051 in rows of 2056 end in partial chunks on
  // the aligned path too; softmax backward and cross-entropy backward also run in place.
  std::mt19937 rng(76);
  const std::int64_t rows = 6, channels = 2056, steps = 264, vocab = 2051;
  for (DType dtype : floating) {
    INFO(loom::dtype_name(dtype));
    const auto values = loom::test::random_tensor({rows * channels}, dtype, rng, 3.0);
    const auto grads = loom::test::random_tensor({rows * channels}, dtype, rng);
    const auto scores = loom::test::random_tensor({2 * steps * steps}, dtype, rng, 4.0);
    const auto score_grads = loom::test::random_tensor({2 * steps * steps}, dtype, rng);
    const auto w = loom::test::random_tensor({channels}, dtype, rng), b = loom::test::random_tensor({channels}, dtype, rng);
    const Tensor gw = w.tensor.to(gpu), gb = b.tensor.to(gpu);
    const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{0, 2050, 17, -1, 3, 1999}, {rows}).to(gpu);
    const Tensor dloss = loom::test::random_tensor({rows}, DType::f32, rng).tensor.to(gpu);
    // The same values at `offset` elements into a GPU buffer, in `shape`.
    auto placed = [&](const Tensor& source, std::int64_t offset, const loom::Shape& shape) {
      const Tensor buffer = Tensor::zeros({source.numel() + 8}, dtype, gpu);
      const Tensor view = buffer.slice(offset, offset + source.numel());
      loom::kernels::cast(source.to(gpu), view);
      return view.view(shape);
    };
    std::vector<std::vector<double>> results[2];
    for (std::int64_t offset : {0, 1}) {
      const loom::Shape matrix{rows, channels}, causal{2, steps, steps};
      const Tensor x = placed(values.tensor, offset, matrix), dy = placed(grads.tensor, offset, matrix);
      const Tensor out = placed(grads.tensor, offset, matrix), dx = placed(grads.tensor, offset, matrix);
      const Tensor mean = Tensor::empty({rows}, DType::f32, gpu), rstd = Tensor::empty({rows}, DType::f32, gpu);
      const Tensor dw = Tensor::zeros({channels}, DType::f32, gpu), db = Tensor::zeros({channels}, DType::f32, gpu);
      loom::kernels::layernorm_forward(x, gw, gb, out, mean, rstd);
      loom::kernels::layernorm_backward(dy, x, gw, mean, rstd, dx, dw, db);
      const Tensor sum = placed(grads.tensor, offset, matrix), fused = placed(grads.tensor, offset, matrix);
      const Tensor mean2 = Tensor::empty({rows}, DType::f32, gpu), rstd2 = Tensor::empty({rows}, DType::f32, gpu);
      loom::kernels::residual_layernorm_forward(x, dy, sum, gw, gb, fused, mean2, rstd2);
      const Tensor s = placed(scores.tensor, offset, causal), ds = placed(score_grads.tensor, offset, causal);
      const Tensor y = placed(scores.tensor, offset, causal);
      loom::kernels::softmax_forward(s, y, {}, /*causal=*/true);
      loom::kernels::softmax_backward(y, ds, ds);  // in place
      loom::kernels::CrossEntropyOptions options;
      options.vocab_size = vocab;
      const Tensor losses = Tensor::empty({rows}, DType::f32, gpu), logits = placed(values.tensor, offset, matrix);
      loom::kernels::cross_entropy_forward(logits, targets, losses, options);
      loom::kernels::cross_entropy_backward(logits, targets, dloss, logits, options);  // in place
      for (const Tensor& t : {out, mean, rstd, dx, sum, fused, mean2, rstd2, y, ds, losses, logits}) {
        results[offset].push_back(loom::test::as_doubles(t.to(Device::cpu())));
      }
    }
    for (std::size_t i = 0; i < results[0].size(); ++i) {
      INFO("output " << i << " (LayerNorm out, mean, rstd, dx; residual sum, out, mean, rstd; causal softmax y, "
                        "dx; cross-entropy losses, dlogits)");
      REQUIRE(results[0][i] == results[1][i]);
    }
  }
}

TEST_CASE("CUDA softmax and cross-entropy match the CPU", "[cuda][kernels]") {
  std::mt19937 rng(73);
  for (DType dtype : floating) {
    INFO(loom::dtype_name(dtype));
    // Rows narrower and wider than a 256-thread block.
    const auto wide = loom::test::random_tensor({3, 1000}, dtype, rng, 5.0);
    const Tensor wide_y = Tensor::empty({3, 1000}, dtype), wide_gpu = gpu_like(wide_y);
    loom::kernels::softmax_forward(wide.tensor, wide_y);
    loom::kernels::softmax_forward(wide.tensor.to(gpu), wide_gpu);
    require_matches(wide_gpu, wide_y, tolerance(dtype), 1e-8);
    const auto x = loom::test::random_tensor({4, 37, 37}, dtype, rng, 5.0), dy = loom::test::random_tensor({4, 37, 37}, dtype, rng);
    for (bool causal : {false, true}) {
      const Tensor y = Tensor::empty({4, 37, 37}, dtype), g_y = gpu_like(y);
      loom::kernels::softmax_forward(x.tensor, y, {}, causal);
      loom::kernels::softmax_forward(x.tensor.to(gpu), g_y, {}, causal);
      require_matches(g_y, y, tolerance(dtype), 1e-7);
      const Tensor dx = Tensor::empty({4, 37, 37}, dtype), g_dx = gpu_like(dx);
      loom::kernels::softmax_backward(y, dy.tensor, dx);
      loom::kernels::softmax_backward(y.to(gpu), dy.tensor.to(gpu), g_dx);
      require_matches(g_dx, dx, tolerance(dtype), 1e-6);
    }
    const std::int64_t rows = 9, width = 50304, vocab = 50257;
    const auto logits = loom::test::random_tensor({rows, width}, dtype, rng, 6.0);
    const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{0, 50256, 17, -1, 3, 3, 40000, 9, 1}, {rows});
    const auto dloss = loom::test::random_tensor({rows}, DType::f32, rng);
    loom::kernels::CrossEntropyOptions options;
    options.vocab_size = vocab;
    const Tensor losses = Tensor::empty({rows}, DType::f32), g_losses = gpu_like(losses);
    loom::kernels::cross_entropy_forward(logits.tensor, targets, losses, options);
    loom::kernels::cross_entropy_forward(logits.tensor.to(gpu), targets.to(gpu), g_losses, options);
    require_matches(g_losses, losses, 1e-5, 1e-5);
    const Tensor dlogits = Tensor::empty({rows, width}, dtype);
    const Tensor g_dlogits = logits.tensor.to(gpu);  // in place on the GPU
    loom::kernels::cross_entropy_backward(logits.tensor, targets, dloss.tensor, dlogits, options);
    loom::kernels::cross_entropy_backward(g_dlogits, targets.to(gpu), dloss.tensor.to(gpu), g_dlogits, options);
    require_matches(g_dlogits, dlogits, tolerance(dtype), 1e-7);
    // An out-of-range target is an error on the GPU too.
    const Tensor bad = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 50257}, {rows}).to(gpu);
    CHECK_THROWS_MATCHES(loom::kernels::cross_entropy_forward(logits.tensor.to(gpu), bad, g_losses, options), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument, {"index 50257", "position 8"}));
  }
}

TEST_CASE("CUDA vocabulary-parallel cross-entropy and embedding match the CPU", "[cuda][kernels]") {
  std::mt19937 rng(75);
  // One shard of GPT-2's padded vocabulary split over 4 ranks (the last, with padding), and rows
  // whose targets fall inside, outside, and are ignored.
  const std::int64_t rows = 6, width = 12576, vocab = 50257, first = 3 * 12576, valid = vocab - first;
  const loom::kernels::VocabShard shard{.first = first, .valid = valid, .vocab_size = vocab, .ignore_index = -1};
  const Tensor targets = Tensor::from_vector(std::vector<std::int64_t>{first, 50256, 17, -1, first + 100, 9}, {rows});
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO(loom::dtype_name(dtype));
    const auto logits = loom::test::random_tensor({rows, width}, dtype, rng, 6.0);
    const Tensor row_max = Tensor::empty({rows}, DType::f32), g_row_max = gpu_like(row_max);
    loom::kernels::vocab_parallel_max(logits.tensor, row_max, shard);
    loom::kernels::vocab_parallel_max(logits.tensor.to(gpu), g_row_max, shard);
    require_matches(g_row_max, row_max, 0, 0);
    const Tensor partial = Tensor::empty({rows, 2}, DType::f32), g_partial = gpu_like(partial);
    loom::kernels::vocab_parallel_sum_exp(logits.tensor, targets, row_max, partial, shard);
    loom::kernels::vocab_parallel_sum_exp(logits.tensor.to(gpu), targets.to(gpu), row_max.to(gpu), g_partial, shard);
    // Against fp64, not the CPU's serial fp32 sum of 12529 terms (its error reaches 1e-5): each
    // GPU thread sums ~50 terms, then a tree of 8 levels: within 60 u of the exact sum, plus expf's
    // 2 ulp and the rounded x - max (8 u at |x - max| <= 12); the target's logit is copied exactly.
    std::vector<double> exact(static_cast<std::size_t>(2 * rows));
    const std::vector<double> x = loom::test::as_doubles(logits.tensor), x_max = loom::test::as_doubles(row_max);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < valid; ++j) exact[2 * r] += std::exp(x[r * width + j] - x_max[r]);
      const std::int64_t t = targets.data<std::int64_t>()[r], column = t - first;
      exact[2 * r + 1] = t != -1 && column >= 0 && column < valid ? x[r * width + column] : 0.0;
    }
    loom::test::require_close(g_partial.to(Device::cpu()), exact, 5e-6, 0);
    const Tensor losses = Tensor::empty({rows}, DType::f32), g_losses = gpu_like(losses);
    loom::kernels::vocab_parallel_loss(targets, row_max, partial, losses, shard);
    loom::kernels::vocab_parallel_loss(targets.to(gpu), row_max.to(gpu), partial.to(gpu), g_losses, shard);
    require_matches(g_losses, losses, 1e-6, 1e-6);
    const auto dloss = loom::test::random_tensor({rows}, DType::f32, rng);
    const Tensor dlogits = Tensor::empty({rows, width}, dtype), g_dlogits = logits.tensor.to(gpu);  // in place on the GPU
    loom::kernels::vocab_parallel_backward(logits.tensor, targets, row_max, partial, dloss.tensor, dlogits, shard);
    loom::kernels::vocab_parallel_backward(g_dlogits, targets.to(gpu), row_max.to(gpu), partial.to(gpu),
                                           dloss.tensor.to(gpu), g_dlogits, shard);
    require_matches(g_dlogits, dlogits, tolerance(dtype), 1e-7);
    const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 4, vocab}, {rows}).to(gpu);
    CHECK_THROWS_MATCHES(loom::kernels::vocab_parallel_sum_exp(logits.tensor.to(gpu), bad, g_row_max, g_partial, shard),
                         loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"index 50257"}));
  }
  const std::int64_t channels = 96;
  const loom::kernels::VocabShard rows_shard{.first = 200, .valid = 150, .vocab_size = 500};
  const auto wte = loom::test::random_tensor({150, channels}, DType::f32, rng);
  std::vector<std::int32_t> tokens(4 * 64);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 500);
  const Tensor tok = Tensor::from_vector(tokens, {4, 64});
  const Tensor out = Tensor::empty({4, 64, channels}, DType::f32), g_out = gpu_like(out);
  loom::kernels::vocab_parallel_embedding_forward(tok, wte.tensor, Tensor(), out, rows_shard);
  loom::kernels::vocab_parallel_embedding_forward(tok.to(gpu), wte.tensor.to(gpu), Tensor(), g_out, rows_shard);
  require_matches(g_out, out, 0, 0);
  const auto dout = loom::test::random_tensor({4, 64, channels}, DType::f32, rng);
  const auto dwte = loom::test::random_tensor({150, channels}, DType::f32, rng);
  const Tensor g_dwte = dwte.tensor.to(gpu);
  loom::kernels::vocab_parallel_embedding_backward(tok, dout.tensor, dwte.tensor, Tensor(), rows_shard);
  loom::kernels::vocab_parallel_embedding_backward(tok.to(gpu), dout.tensor.to(gpu), g_dwte, Tensor(), rows_shard);
  require_matches(g_dwte, dwte.tensor, 0, 0);  // the same additions in the same order
  // With the position embedding (the rank of a tensor group that adds it): the lookup exact, its
  // gradient summed over the batch like embedding.cu's (fp32, batch order).
  const auto wpe = loom::test::random_tensor({80, channels}, DType::f32, rng);
  const auto dwpe = loom::test::random_tensor({80, channels}, DType::f32, rng);
  const Tensor g_dwpe = dwpe.tensor.to(gpu), g_out_wpe = gpu_like(out);
  loom::kernels::vocab_parallel_embedding_forward(tok, wte.tensor, wpe.tensor, out, rows_shard);
  loom::kernels::vocab_parallel_embedding_forward(tok.to(gpu), wte.tensor.to(gpu), wpe.tensor.to(gpu), g_out_wpe,
                                                  rows_shard);
  require_matches(g_out_wpe, out, 0, 0);
  const Tensor dwpe_before = dwpe.tensor.clone();
  loom::kernels::vocab_parallel_embedding_backward(tok, dout.tensor, dwte.tensor, dwpe.tensor, rows_shard);
  loom::kernels::vocab_parallel_embedding_backward(tok.to(gpu), dout.tensor.to(gpu), g_dwte, g_dwpe, rows_shard);
  require_matches(g_dwte, dwte.tensor, 0, 0);
  require_batch_sum(dwpe.tensor, dwpe_before, dout.tensor);
  require_batch_sum(g_dwpe, dwpe_before, dout.tensor);
}

TEST_CASE("CUDA embedding matches the CPU exactly and deterministically", "[cuda][kernels]") {
  std::mt19937 rng(74);
  const std::int64_t batch = 4, steps = 64, vocab = 500, channels = 96;
  const auto wte = loom::test::random_tensor({vocab, channels}, DType::f32, rng);
  const auto wpe = loom::test::random_tensor({steps, channels}, DType::f32, rng);
  std::vector<std::int32_t> tokens(batch * steps);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 40);  // many repeats
  const Tensor tok = Tensor::from_vector(tokens, {batch, steps});
  const Tensor out = Tensor::empty({batch, steps, channels}, DType::f32), g_out = gpu_like(out);
  loom::kernels::embedding_forward(tok, wte.tensor, wpe.tensor, out);
  loom::kernels::embedding_forward(tok.to(gpu), wte.tensor.to(gpu), wpe.tensor.to(gpu), g_out);
  require_matches(g_out, out, 0, 0);
  const auto dout = loom::test::random_tensor({batch, steps, channels}, DType::f32, rng);
  const Tensor dwte = Tensor::zeros({vocab, channels}, DType::f32), dwpe = Tensor::zeros({steps, channels}, DType::f32);
  loom::kernels::embedding_backward(tok, dout.tensor, dwte, dwpe);
  const Tensor g_dwte = Tensor::zeros({vocab, channels}, DType::f32, gpu), g_dwpe = Tensor::zeros({steps, channels}, DType::f32, gpu);
  loom::kernels::embedding_backward(tok.to(gpu), dout.tensor.to(gpu), g_dwte, g_dwpe);
  require_matches(g_dwte, dwte, 0, 0);  // same order of additions: identical bits
  require_batch_sum(dwpe, Tensor::zeros({steps, channels}, DType::f32), dout.tensor);
  require_batch_sum(g_dwpe, Tensor::zeros({steps, channels}, DType::f32), dout.tensor);
  for (std::int32_t bad : {-1, static_cast<std::int32_t>(vocab)}) {
    std::vector<std::int32_t> with_bad = tokens;
    with_bad[77] = bad;
    CHECK_THROWS_MATCHES(loom::kernels::embedding_forward(Tensor::from_vector(with_bad, {batch, steps}).to(gpu),
                                                          wte.tensor.to(gpu), wpe.tensor.to(gpu), g_out),
                         loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument, {"token", "position 77"}));
  }
}

TEST_CASE("CUDA embedding backward at a GPT-2 batch adds onto existing gradients with the CPU's bits",
          "[cuda][kernels]") {
  std::mt19937 rng(76);
  const std::int64_t batch = 8, steps = 1024, vocab = 5000, channels = 200;
  std::vector<std::int32_t> tokens(batch * steps);
  // Skewed like text: small ids repeat hundreds of times, large ones rarely.
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % (1 + rng() % (vocab - 1)));
  const Tensor tok = Tensor::from_vector(tokens, {batch, steps});
  const auto dout = loom::test::random_tensor({batch, steps, channels}, DType::f32, rng);
  const auto dwte = loom::test::random_tensor({vocab, channels}, DType::f32, rng);
  const auto dwpe = loom::test::random_tensor({steps, channels}, DType::f32, rng);
  const Tensor g_dwte = dwte.tensor.to(gpu), g_dwpe = dwpe.tensor.to(gpu), dwpe_before = dwpe.tensor.clone();
  loom::kernels::embedding_backward(tok, dout.tensor, dwte.tensor, dwpe.tensor);
  loom::kernels::embedding_backward(tok.to(gpu), dout.tensor.to(gpu), g_dwte, g_dwpe);
  require_matches(g_dwte, dwte.tensor, 0, 0);  // same additions in the same order: identical bits
  require_batch_sum(dwpe.tensor, dwpe_before, dout.tensor);
  require_batch_sum(g_dwpe, dwpe_before, dout.tensor);
}

TEST_CASE("CUDA optimizers and gradient utilities match the CPU", "[cuda][kernels]") {
  std::mt19937 rng(75);
  const auto param = loom::test::random_tensor({10007}, DType::f32, rng);
  const auto grad = loom::test::random_tensor({10007}, DType::bf16, rng);
  loom::kernels::AdamWHyperparameters hp;
  hp.lr = 1e-2f, hp.weight_decay = 0.1f, hp.step = 3;
  const Tensor cpu_p = param.tensor.clone(), cpu_m = Tensor::full({10007}, DType::f32, 0.01),
               cpu_v = Tensor::full({10007}, DType::f32, 0.02), cpu_model = Tensor::empty({10007}, DType::bf16);
  const loom::kernels::AdamWTensor on_cpu{cpu_p, grad.tensor, cpu_m, cpu_v, cpu_model, true};
  const loom::kernels::AdamWTensor on_gpu{cpu_p.to(gpu).clone(), grad.tensor.to(gpu), cpu_m.to(gpu).clone(),
                                          cpu_v.to(gpu).clone(), gpu_like(cpu_model), true};
  loom::kernels::adamw_step(std::span(&on_cpu, 1), hp);
  loom::kernels::adamw_step(std::span(&on_gpu, 1), hp);
  require_matches(on_gpu.param, on_cpu.param, 1e-6, 1e-7);
  require_matches(on_gpu.m, on_cpu.m, 1e-6, 1e-8);
  require_matches(on_gpu.v, on_cpu.v, 1e-6, 1e-9);
  // The bf16 model copy is the (nearly equal) master weights rounded: at most one bf16 step apart.
  require_matches(on_gpu.model, on_cpu.model, loom::test::ulp_of(DType::bf16), 1e-7);

  loom::kernels::SgdHyperparameters sgd;
  sgd.lr = 0.1f, sgd.momentum = 0.9f, sgd.weight_decay = 0.01f, sgd.nesterov = true, sgd.step = 1;
  const loom::kernels::SgdTensor sgd_cpu{param.tensor.clone(), grad.tensor, Tensor::empty({10007}, DType::f32), Tensor(), true};
  const loom::kernels::SgdTensor sgd_gpu{param.tensor.to(gpu), grad.tensor.to(gpu), gpu_like(sgd_cpu.momentum_buffer),
                                         Tensor(), true};
  for (std::int64_t step = 1; step <= 2; ++step) {
    sgd.step = step;
    loom::kernels::sgd_step(std::span(&sgd_cpu, 1), sgd);
    loom::kernels::sgd_step(std::span(&sgd_gpu, 1), sgd);
  }
  require_matches(sgd_gpu.param, sgd_cpu.param, 1e-6, 1e-7);
  require_matches(sgd_gpu.momentum_buffer, sgd_cpu.momentum_buffer, 1e-6, 1e-7);

  const std::vector<Tensor> cpu_grads = {loom::test::random_tensor({999}, DType::f32, rng).tensor,
                                         loom::test::random_tensor({70001}, DType::bf16, rng).tensor};
  const std::vector<Tensor> gpu_grads = {cpu_grads[0].to(gpu), cpu_grads[1].to(gpu)};
  const Tensor norm = Tensor::empty({1}, DType::f32), g_norm = gpu_like(norm);
  loom::kernels::global_l2_norm(cpu_grads, norm);
  loom::kernels::global_l2_norm(gpu_grads, g_norm);
  require_matches(g_norm, norm, 1e-5, 0);
  loom::kernels::sum_of_squares(cpu_grads, norm);
  loom::kernels::sum_of_squares(gpu_grads, g_norm);
  require_matches(g_norm, norm, 1e-5, 0);
  const Tensor flag = Tensor::zeros({1}, DType::f32, gpu);
  loom::kernels::unscale_and_check_finite(gpu_grads, 0.5f, flag);
  CHECK(flag.item<float>() == 0.0f);
  loom::kernels::unscale_and_check_finite(cpu_grads, 0.5f, Tensor::zeros({1}, DType::f32));
  require_matches(gpu_grads[1], cpu_grads[1], 0, 0);
  loom::fill(gpu_grads[0].slice(5, 6), NAN);
  loom::kernels::unscale_and_check_finite(gpu_grads, 1.0f, flag);
  CHECK(flag.item<float>() == 1.0f);
}

TEST_CASE("CUDA accumulate_mean matches the CPU, and trusted indices out of range give NaN, never a stray read",
          "[cuda][kernels]") {
  std::mt19937 rng(77);
  const auto values = loom::test::random_tensor({8191}, DType::f32, rng, 10.0);
  const Tensor cpu_out = Tensor::from_vector(std::vector<float>{2.0f}, {1}), gpu_out = cpu_out.to(gpu);
  loom::kernels::accumulate_mean(values.tensor, 777.0, cpu_out);
  loom::kernels::accumulate_mean(values.tensor.to(gpu), 777.0, gpu_out);
  require_matches(gpu_out, cpu_out, 1e-6, 1e-7);

  const std::int64_t vocab = 50;
  const auto logits = loom::test::random_tensor({4, 64}, DType::f32, rng);
  const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{3, 999, -1, 7}, {4});
  const Tensor losses = Tensor::empty({4}, DType::f32, gpu);
  loom::kernels::CrossEntropyOptions ce;
  ce.vocab_size = vocab;
  ce.targets = loom::kernels::IndexCheck::trusted;
  loom::kernels::cross_entropy_forward(logits.tensor.to(gpu), targets.to(gpu), losses, ce);
  const std::vector<float> got = losses.to(Device::cpu()).to_vector<float>();
  REQUIRE(std::isfinite(got[0]));
  REQUIRE(std::isnan(got[1]));
  REQUIRE(got[2] == 0.0f);  // ignored
  const auto wte = loom::test::random_tensor({vocab, 16}, DType::f32, rng), wpe = loom::test::random_tensor({4, 16}, DType::f32, rng);
  const Tensor out = Tensor::empty({1, 4, 16}, DType::f32, gpu);
  loom::kernels::embedding_forward(Tensor::from_vector(std::vector<std::int32_t>{1, 2, 50, 3}, {1, 4}).to(gpu),
                                   wte.tensor.to(gpu), wpe.tensor.to(gpu), out, {}, loom::kernels::IndexCheck::trusted);
  const std::vector<float> rows = out.to(Device::cpu()).to_vector<float>();
  for (int c = 0; c < 16; ++c) {
    REQUIRE(std::isfinite(rows[16 + c]));
    REQUIRE(std::isnan(rows[32 + c]));
  }
}
