// Token + position embedding: forward exactly, backward as exact sums, deterministic.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "loom/kernels/embedding.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::Tensor;

TEST_CASE("embedding forward adds the token and position rows", "[kernels][embedding]") {
  std::mt19937 rng(41);
  const std::int64_t batch = 3, steps = 5, vocab = 11, channels = 70, max_t = 8;
  auto wte = loom::test::random_tensor({vocab, channels}, DType::f32, rng);
  auto wpe = loom::test::random_tensor({max_t, channels}, DType::f32, rng);
  std::vector<std::int32_t> tokens(batch * steps);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % vocab);
  const Tensor out = Tensor::empty({batch, steps, channels}, DType::f32);
  loom::test::poison(out);
  loom::kernels::embedding_forward(Tensor::from_vector(tokens, {batch, steps}), wte.tensor, wpe.tensor, out);
  std::vector<double> expected;
  for (std::int64_t i = 0; i < batch * steps; ++i) {
    for (std::int64_t c = 0; c < channels; ++c) {
      expected.push_back(static_cast<float>(wte.values[static_cast<std::size_t>(tokens[i] * channels + c)] +
                                            wpe.values[static_cast<std::size_t>((i % steps) * channels + c)]));
    }
  }
  loom::test::require_close(out, expected, 0, 0);  // one fp32 addition: exact as float
}

TEST_CASE("embedding backward sums gradients per token and position, deterministically", "[kernels][embedding]") {
  const std::int64_t batch = 2, steps = 4, vocab = 6, channels = 300;
  // Small integers: every sum is exact in fp32, so the expected values are exact.
  const std::vector<std::int32_t> tokens = {1, 3, 1, 5, 3, 3, 0, 1};
  std::vector<float> dout(batch * steps * channels);
  for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  const Tensor dwte = Tensor::full({vocab, channels}, DType::f32, 1.0), dwpe = Tensor::full({8, channels}, DType::f32, 2.0);
  const Tensor token_tensor = Tensor::from_vector(tokens, {batch, steps});
  loom::kernels::embedding_backward(token_tensor, Tensor::from_vector(dout, {batch, steps, channels}), dwte, dwpe);
  std::vector<double> wte_ref(static_cast<std::size_t>(vocab * channels), 1.0), wpe_ref(8 * channels, 2.0);
  for (std::int64_t i = 0; i < batch * steps; ++i) {
    for (std::int64_t c = 0; c < channels; ++c) {
      wte_ref[static_cast<std::size_t>(tokens[i] * channels + c)] += dout[static_cast<std::size_t>(i * channels + c)];
      wpe_ref[static_cast<std::size_t>((i % steps) * channels + c)] += dout[static_cast<std::size_t>(i * channels + c)];
    }
  }
  loom::test::require_close(dwte, wte_ref, 0, 0);
  loom::test::require_close(dwpe, wpe_ref, 0, 0);
  CHECK_THROWS_MATCHES(loom::kernels::embedding_backward(token_tensor, Tensor::zeros({batch, steps, channels}, DType::bf16),
                                                         Tensor::zeros({vocab, channels}, DType::bf16),
                                                         Tensor::zeros({8, channels}, DType::bf16)),
                       loom::Error, loom::test::IsError(loom::ErrorCategory::invalid_argument, {"'dwte' must be f32"}));
  CHECK_THROWS_MATCHES(loom::kernels::embedding_forward(Tensor::from_vector(std::vector<std::int32_t>{2, 6}, {1, 2}),
                                                        Tensor::zeros({6, 4}, DType::f32),
                                                        Tensor::zeros({2, 4}, DType::f32),
                                                        Tensor::zeros({1, 2, 4}, DType::f32)),
                       loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"token 6", "(0, 1)", "[0, 6)"}));
}
