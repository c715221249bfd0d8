// The vocabulary-parallel kernels (loom/kernels/vocab_parallel.hpp) with the vocabulary split the
// way a tensor group splits it: 37 token ids over 1 to 4 shards (37 divides by none of 2, 3, 4),
// each shard's logits padded to a common width with large garbage that must take no part. The
// communication between the passes is done here by hand (max and sum over the shards), as
// nn/vocab_parallel does over the group. Checked: the losses against fp64 cross-entropy over the
// whole vocabulary, the gradient against the fp64 softmax gradient and against central finite
// differences of the fp64 loss, an ignored row; the embedding's lookup and gradient summed over
// the shards against the whole table; and the argument errors, each named.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/cast.hpp"
#include "loom/kernels/embedding.hpp"
#include "loom/kernels/vocab_parallel.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::kernels::VocabShard;
using loom::test::IsError;

namespace {

constexpr std::int64_t vocab = 37, rows = 5, ignore = -100;

// Shard p of `parts`: token ids [37 p / parts, 37 (p + 1) / parts).
VocabShard shard_of(int p, int parts) {
  const std::int64_t first = vocab * p / parts, end = vocab * (p + 1) / parts;
  return {.first = first, .valid = end - first, .vocab_size = vocab, .ignore_index = ignore};
}

double loss64(const std::vector<double>& logits, std::int64_t r, std::int64_t t) {
  double m = -INFINITY, sum = 0;
  for (std::int64_t j = 0; j < vocab; ++j) m = std::max(m, logits[static_cast<std::size_t>(r * vocab + j)]);
  for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[static_cast<std::size_t>(r * vocab + j)] - m);
  return m + std::log(sum) - logits[static_cast<std::size_t>(r * vocab + t)];
}

}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy over 1-4 shards matches fp64 and finite differences",
          "[kernels][vocab_parallel]") {
  std::mt19937 rng(91);
  const std::vector<std::int64_t> targets = {3, 36, ignore, 0, 18};
  const Tensor target_tensor = Tensor::from_vector(targets, {rows});
  const std::vector<float> dloss = {0.5f, 1.0f, 1.0f, -2.0f, 0.25f};
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const auto full = loom::test::random_tensor({rows, vocab}, dtype, rng, 6.0);
    std::vector<double> x = full.values;  // as stored in dtype
    for (const int parts : {1, 2, 3, 4}) {
      INFO(loom::dtype_name(dtype) << ", " << parts << " shard(s)");
      const std::int64_t width = (vocab + parts - 1) / parts + 3;  // padded past the widest shard
      std::vector<Tensor> shards;
      for (int p = 0; p < parts; ++p) {
        const VocabShard s = shard_of(p, parts);
        std::vector<double> values(static_cast<std::size_t>(rows * width), 1e4);  // padding: must not count
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t j = 0; j < s.valid; ++j) {
            values[static_cast<std::size_t>(r * width + j)] = x[static_cast<std::size_t>(r * vocab + s.first + j)];
          }
        }
        shards.push_back(loom::test::from_doubles(values, {rows, width}, dtype).tensor);
      }
      // Pass 1 and the all-reduce max.
      std::vector<float> row_max(rows, -INFINITY);
      for (int p = 0; p < parts; ++p) {
        const Tensor m = Tensor::empty({rows}, DType::f32);
        loom::kernels::vocab_parallel_max(shards[static_cast<std::size_t>(p)], m, shard_of(p, parts));
        for (std::int64_t r = 0; r < rows; ++r) row_max[static_cast<std::size_t>(r)] = std::max(row_max[static_cast<std::size_t>(r)], m.data<float>()[r]);
      }
      const Tensor max_tensor = Tensor::from_vector(row_max, {rows});
      // Pass 2 and the all-reduce sum.
      std::vector<float> sums(2 * rows, 0.0f);
      for (int p = 0; p < parts; ++p) {
        const Tensor partial = Tensor::empty({rows, 2}, DType::f32);
        loom::kernels::vocab_parallel_sum_exp(shards[static_cast<std::size_t>(p)], target_tensor, max_tensor, partial,
                                              shard_of(p, parts));
        for (std::int64_t i = 0; i < 2 * rows; ++i) sums[static_cast<std::size_t>(i)] += partial.data<float>()[i];
      }
      const Tensor sum_tensor = Tensor::from_vector(sums, {rows, 2});
      const Tensor losses = Tensor::empty({rows}, DType::f32);
      loom::kernels::vocab_parallel_loss(target_tensor, max_tensor, sum_tensor, losses, shard_of(0, parts));
      std::vector<double> expected;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t t = targets[static_cast<std::size_t>(r)];
        expected.push_back(t == ignore ? 0.0 : loss64(x, r, t));
      }
      loom::test::require_close(losses, expected, 1e-5, 1e-5);
      // Backward: every shard's columns against the fp64 softmax gradient and finite differences
      // of the fp64 loss; padding and the ignored row get 0.
      const Tensor dlosses = Tensor::from_vector(dloss, {rows});
      for (int p = 0; p < parts; ++p) {
        const VocabShard s = shard_of(p, parts);
        const Tensor& logits = shards[static_cast<std::size_t>(p)];
        const Tensor dlogits = Tensor::empty(logits.shape(), dtype);
        loom::kernels::vocab_parallel_backward(logits, target_tensor, max_tensor, sum_tensor, dlosses, dlogits, s);
        const std::vector<double> got = loom::test::as_doubles(dlogits);
        const double tolerance = dtype == DType::f32 ? 1e-5 : 2 * loom::test::ulp_of(dtype);
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t t = targets[static_cast<std::size_t>(r)];
          for (std::int64_t j = 0; j < width; ++j) {
            const double value = got[static_cast<std::size_t>(r * width + j)];
            INFO("row " << r << ", column " << j);
            if (t == ignore || j >= s.valid) {
              REQUIRE(value == 0.0);
              continue;
            }
            const std::size_t at = static_cast<std::size_t>(r * vocab + s.first + j);
            const double derivative = loom::test::finite_difference(x, at, [&] { return loss64(x, r, t); });
            REQUIRE(std::fabs(value - dloss[static_cast<std::size_t>(r)] * derivative) <= tolerance);
          }
        }
      }
      // In place, as a model computes it, gives the same bits.
      const Tensor in_place = shards.back().clone();
      loom::kernels::vocab_parallel_backward(in_place, target_tensor, max_tensor, sum_tensor, dlosses, in_place,
                                             shard_of(parts - 1, parts));
      const Tensor apart = Tensor::empty(shards.back().shape(), dtype);
      loom::kernels::vocab_parallel_backward(shards.back(), target_tensor, max_tensor, sum_tensor, dlosses, apart,
                                             shard_of(parts - 1, parts));
      REQUIRE(loom::test::as_doubles(in_place) == loom::test::as_doubles(apart));
    }
  }
}

TEST_CASE("the vocabulary-parallel embedding summed over the shards is the whole table's", "[kernels][vocab_parallel]") {
  std::mt19937 rng(92);
  constexpr std::int64_t channels = 8;
  const auto table = loom::test::random_tensor({vocab, channels}, DType::f32, rng);
  const std::vector<std::int32_t> token_ids = {0, 36, 5, 5, 18, 19, 36, 2, 5, 30};
  const Tensor tokens = Tensor::from_vector(token_ids, {2, 5});
  const auto dout = loom::test::random_tensor({2, 5, channels}, DType::f32, rng);
  for (const int parts : {1, 2, 3, 4}) {
    INFO(parts << " shard(s)");
    std::vector<double> summed(static_cast<std::size_t>(10 * channels), 0.0);
    for (int p = 0; p < parts; ++p) {
      const VocabShard s = shard_of(p, parts);
      const Tensor rows_of_table = table.tensor.slice(s.first, s.first + s.valid).clone();
      const Tensor out = Tensor::empty({2, 5, channels}, DType::f32);
      loom::kernels::vocab_parallel_embedding_forward(tokens, rows_of_table, Tensor(), out, s);
      const std::vector<double> got = loom::test::as_doubles(out);
      for (std::size_t i = 0; i < got.size(); ++i) summed[i] += got[i];
      // Backward onto existing gradients (1.0 everywhere): this shard's rows alone.
      const Tensor dwte = Tensor::full({s.valid, channels}, DType::f32, 1.0);
      loom::kernels::vocab_parallel_embedding_backward(tokens, dout.tensor, dwte, Tensor(), s);
      std::vector<double> expected(static_cast<std::size_t>(s.valid * channels), 1.0);
      for (std::size_t i = 0; i < token_ids.size(); ++i) {
        const std::int64_t row = token_ids[i] - s.first;
        if (row < 0 || row >= s.valid) continue;
        for (std::int64_t c = 0; c < channels; ++c) {
          expected[static_cast<std::size_t>(row * channels + c)] += dout.values[i * channels + static_cast<std::size_t>(c)];
        }
      }
      loom::test::require_close(dwte, expected, 1e-6, 1e-6);
    }
    std::vector<double> whole;
    for (const std::int32_t t : token_ids) {
      for (std::int64_t c = 0; c < channels; ++c) whole.push_back(table.values[static_cast<std::size_t>(t * channels + c)]);
    }
    REQUIRE(summed == whole);  // one shard's row plus zeros: exact
  }
}

TEST_CASE("vocabulary-parallel kernels name bad arguments", "[kernels][vocab_parallel]") {
  const Tensor logits = Tensor::zeros({2, 10}, DType::f32), row_max = Tensor::zeros({2}, DType::f32);
  const Tensor partial = Tensor::zeros({2, 2}, DType::f32);
  const VocabShard shard{.first = 30, .valid = 10, .vocab_size = vocab};
  REQUIRE_THROWS_MATCHES(loom::kernels::vocab_parallel_max(logits, row_max, shard), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"vocab_parallel_max", "ids [30, 40)", "vocabulary of 37"}));
  const VocabShard fits{.first = 27, .valid = 10, .vocab_size = vocab};
  REQUIRE_THROWS_MATCHES(loom::kernels::vocab_parallel_max(logits, row_max, VocabShard{.valid = 11, .vocab_size = vocab}),
                         loom::Error, IsError(ErrorCategory::invalid_argument, {"11 real columns exceed its width 10"}));
  const Tensor bad_targets = Tensor::from_vector(std::vector<std::int64_t>{3, 37}, {2});
  REQUIRE_THROWS_MATCHES(loom::kernels::vocab_parallel_sum_exp(logits, bad_targets, row_max, partial, fits), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"target 37 at row 1", "[0, 37)"}));
  REQUIRE_THROWS_MATCHES(loom::kernels::vocab_parallel_sum_exp(logits, bad_targets, row_max, Tensor::zeros({2}, DType::f32), fits),
                         loom::Error, IsError(ErrorCategory::invalid_argument, {"vocab_parallel_sum_exp", "partial"}));
  const Tensor bad_tokens = Tensor::from_vector(std::vector<std::int32_t>{1, -1}, {1, 2});
  REQUIRE_THROWS_MATCHES(loom::kernels::vocab_parallel_embedding_forward(bad_tokens, Tensor::zeros({10, 4}, DType::f32),
                                                                         Tensor(), Tensor::zeros({1, 2, 4}, DType::f32),
                                                                         fits),
                         loom::Error, IsError(ErrorCategory::invalid_argument, {"token -1 at position 1"}));
}

TEST_CASE("with the position embedding on one shard, the sum over shards is embedding_forward's, bit for bit",
          "[kernels][vocab_parallel]") {
  std::mt19937 rng(93);
  constexpr std::int64_t channels = 8, steps = 5;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype);
    const auto table = loom::test::random_tensor({vocab, channels}, dtype, rng);
    const auto wpe = loom::test::random_tensor({7, channels}, dtype, rng);
    const Tensor tokens = Tensor::from_vector(std::vector<std::int32_t>{0, 36, 5, 5, 18, 19, 36, 2, 5, 30}, {2, steps});
    const auto dout = loom::test::random_tensor({2, steps, channels}, DType::f32, rng);
    const Tensor whole = Tensor::empty({2, steps, channels}, dtype);
    loom::kernels::embedding_forward(tokens, table.tensor, wpe.tensor, whole);
    const Tensor dwte_whole = Tensor::zeros({vocab, channels}, DType::f32), dwpe_whole = Tensor::zeros({7, channels}, DType::f32);
    loom::kernels::embedding_backward(tokens, dout.tensor, dwte_whole, dwpe_whole);
    for (const int parts : {1, 2, 3}) {
      INFO(parts << " shard(s)");
      std::vector<float> summed(static_cast<std::size_t>(2 * steps * channels), 0.0f);
      for (int p = 0; p < parts; ++p) {
        const VocabShard s = shard_of(p, parts);
        const Tensor rows_of_table = table.tensor.slice(s.first, s.first + s.valid).clone();
        const Tensor out = Tensor::empty({2, steps, channels}, dtype);
        loom::kernels::vocab_parallel_embedding_forward(tokens, rows_of_table, p == parts - 1 ? wpe.tensor : Tensor(),
                                                        out, s);
        const Tensor wide = Tensor::empty(out.shape(), DType::f32);
        loom::kernels::cast(out, wide);
        const std::vector<float> got = wide.to_vector<float>();
        for (std::size_t i = 0; i < got.size(); ++i) summed[i] += got[i];  // one non-zero term, or wpe alone
        const Tensor dwte = Tensor::zeros({s.valid, channels}, DType::f32), dwpe = Tensor::zeros({7, channels}, DType::f32);
        loom::kernels::vocab_parallel_embedding_backward(tokens, dout.tensor, dwte, dwpe, s);
        REQUIRE(dwpe.to_vector<float>() == dwpe_whole.to_vector<float>());  // every shard: the same additions
        REQUIRE(dwte.to_vector<float>() == dwte_whole.slice(s.first, s.first + s.valid).clone().to_vector<float>());
      }
      const Tensor wide_whole = Tensor::empty(whole.shape(), DType::f32);
      loom::kernels::cast(whole, wide_whole);
      if (dtype == DType::f32) {
        REQUIRE(summed == wide_whole.to_vector<float>());
      } else {
        // The sum of a bf16 token row and a bf16 position row, rounded once: the all-reduce's
        // rounding of (wpe + row) in f32 is that. Here the test adds in f32 and rounds itself.
        const Tensor rounded = Tensor::empty({2, steps, channels}, DType::bf16);
        loom::kernels::cast(Tensor::from_vector(summed, {2, steps, channels}), rounded);
        const Tensor back = Tensor::empty(rounded.shape(), DType::f32);
        loom::kernels::cast(rounded, back);
        REQUIRE(back.to_vector<float>() == wide_whole.to_vector<float>());
      }
    }
  }
}
