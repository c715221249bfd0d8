// Fused AdamW and SGD against fp64 references of PyTorch's update rules over several steps;
// gradient unscaling with the non-finite check; global L2 norm.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "loom/kernels/grad_utils.hpp"
#include "loom/kernels/optimizer.hpp"
#include "support/reference.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::test::IsError;

TEST_CASE("AdamW matches fp64 over several steps, with decay masks, low-precision grads and model copies",
          "[kernels][optimizer]") {
  std::mt19937 rng(51);
  const std::vector<std::int64_t> sizes = {1, 257, 33};
  const DType grad_dtypes[] = {DType::f32, DType::bf16, DType::f16};
  loom::kernels::AdamWHyperparameters hp;
  hp.lr = 1e-2f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f, hp.grad_scale = 0.5f;

  std::vector<loom::kernels::AdamWTensor> tensors;
  std::vector<std::vector<double>> p64, m64, v64;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    auto param = loom::test::random_tensor({sizes[t]}, DType::f32, rng);
    p64.push_back(param.values);
    m64.emplace_back(param.values.size(), 0.0);
    v64.emplace_back(param.values.size(), 0.0);
    loom::kernels::AdamWTensor state;
    state.param = param.tensor;
    state.m = Tensor::zeros({sizes[t]}, DType::f32);
    state.v = Tensor::zeros({sizes[t]}, DType::f32);
    state.model = Tensor::empty({sizes[t]}, DType::bf16);
    loom::test::poison(state.model);
    state.decay = t != 1;  // tensor 1 plays a bias: no weight decay
    tensors.push_back(state);
  }
  for (std::int64_t step = 1; step <= 3; ++step) {
    hp.step = step;
    std::vector<std::vector<double>> g64;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      auto grad = loom::test::random_tensor({sizes[t]}, grad_dtypes[t], rng);
      tensors[t].grad = grad.tensor;
      g64.push_back(grad.values);
    }
    loom::kernels::adamw_step(tensors, hp);
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      const double b1 = hp.beta1, b2 = hp.beta2;
      for (std::size_t i = 0; i < p64[t].size(); ++i) {
        const double g = g64[t][i] * hp.grad_scale;
        m64[t][i] = b1 * m64[t][i] + (1 - b1) * g;
        v64[t][i] = b2 * v64[t][i] + (1 - b2) * g * g;
        const double m_hat = m64[t][i] / (1 - std::pow(b1, step)), v_hat = v64[t][i] / (1 - std::pow(b2, step));
        const double decay = tensors[t].decay ? hp.lr * hp.weight_decay : 0.0;
        p64[t][i] = p64[t][i] - decay * p64[t][i] - hp.lr * m_hat / (std::sqrt(v_hat) + hp.eps);
      }
      INFO("step " << step << " tensor " << t);
      loom::test::require_close(tensors[t].param, p64[t], 1e-5, 1e-6);
      loom::test::require_close(tensors[t].m, m64[t], 1e-5, 1e-7);
      loom::test::require_close(tensors[t].v, v64[t], 1e-5, 1e-9);
      // The model copy is exactly the master weights rounded to bf16.
      const auto master = tensors[t].param.to_vector<float>();
      const auto model = tensors[t].model.to_vector<loom::bfloat16>();
      for (std::size_t i = 0; i < master.size(); ++i) REQUIRE(model[i].bits == loom::float_to_bf16_bits(master[i]));
    }
  }
}

TEST_CASE("SGD with momentum, dampening, nesterov and weight decay matches fp64", "[kernels][optimizer]") {
  std::mt19937 rng(52);
  for (bool nesterov : {false, true}) {
    loom::kernels::SgdHyperparameters hp;
    hp.lr = 0.1f, hp.momentum = 0.9f, hp.weight_decay = 0.01f, hp.nesterov = nesterov;
    hp.dampening = nesterov ? 0.0f : 0.2f;
    auto param = loom::test::random_tensor({101}, DType::f32, rng);
    std::vector<double> p = param.values, buf(p.size(), 0.0);
    loom::kernels::SgdTensor state{param.tensor, Tensor(), Tensor::empty({101}, DType::f32), Tensor(), true};
    loom::test::poison(state.momentum_buffer);  // step 1 must overwrite it, never read it
    for (std::int64_t step = 1; step <= 3; ++step) {
      hp.step = step;
      auto grad = loom::test::random_tensor({101}, DType::f32, rng);
      state.grad = grad.tensor;
      loom::kernels::sgd_step(std::span(&state, 1), hp);
      for (std::size_t i = 0; i < p.size(); ++i) {
        double g = grad.values[i] + hp.weight_decay * p[i];
        buf[i] = step == 1 ? g : hp.momentum * buf[i] + (1 - hp.dampening) * g;
        g = nesterov ? g + hp.momentum * buf[i] : buf[i];
        p[i] -= hp.lr * g;
      }
      INFO("nesterov " << nesterov << " step " << step);
      loom::test::require_close(state.param, p, 1e-5, 1e-6);
      loom::test::require_close(state.momentum_buffer, buf, 1e-5, 1e-6);
    }
  }
  // Plain SGD needs no momentum buffer.
  loom::kernels::SgdTensor plain{Tensor::full({3}, DType::f32, 1.0), Tensor::full({3}, DType::bf16, 2.0), Tensor(),
                                 Tensor::empty({3}, DType::f16), false};
  loom::kernels::SgdHyperparameters hp;
  hp.lr = 0.25f;
  loom::kernels::sgd_step(std::span(&plain, 1), hp);
  CHECK(plain.param.to_vector<float>() == std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK(loom::to_float(plain.model.to_vector<loom::half>()[0]) == 0.5f);
}

TEST_CASE("optimizer arguments are checked per tensor", "[kernels][optimizer]") {
  loom::kernels::AdamWTensor bad{Tensor::zeros({4}, DType::f32), Tensor::zeros({5}, DType::f32),
                                 Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f32), Tensor(), true};
  CHECK_THROWS_MATCHES(loom::kernels::adamw_step(std::span(&bad, 1), {}), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"adamw_step (tensor 0)", "'grad' must have 4 elements"}));
  bad.grad = Tensor::zeros({4}, DType::f32);
  bad.v = Tensor::zeros({4}, DType::bf16);
  CHECK_THROWS_MATCHES(loom::kernels::adamw_step(std::span(&bad, 1), {}), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"'v' must be f32"}));
  loom::kernels::AdamWHyperparameters hp;
  hp.step = 0;
  CHECK_THROWS_MATCHES(loom::kernels::adamw_step(std::span(&bad, 1), hp), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"step must be >= 1"}));
  loom::kernels::SgdTensor no_buffer{Tensor::zeros({2}, DType::f32), Tensor::zeros({2}, DType::f32), Tensor(), Tensor(), true};
  loom::kernels::SgdHyperparameters momentum;
  momentum.momentum = 0.9f;
  CHECK_THROWS_MATCHES(loom::kernels::sgd_step(std::span(&no_buffer, 1), momentum), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"'momentum_buffer' is an undefined tensor"}));
}

TEST_CASE("unscaling multiplies every gradient and flags infinities and NaNs", "[kernels][grad_utils]") {
  const Tensor a = Tensor::from_vector(std::vector<float>{2.0f, -4.0f, 65536.0f}, {3});
  const Tensor b = Tensor::full({1000}, DType::bf16, 8.0);
  const Tensor flag = Tensor::zeros({1}, DType::f32);
  const std::vector<Tensor> grads = {a, b};
  loom::kernels::unscale_and_check_finite(grads, 0.25f, flag);
  CHECK(a.to_vector<float>() == std::vector<float>{0.5f, -1.0f, 16384.0f});
  for (loom::bfloat16 v : b.to_vector<loom::bfloat16>()) REQUIRE(loom::to_float(v) == 2.0f);
  CHECK(flag.item<float>() == 0.0f);

  b.at<loom::bfloat16>({999}) = loom::to_bfloat16(NAN);
  loom::kernels::unscale_and_check_finite(grads, 1.0f, flag);
  CHECK(flag.item<float>() == 1.0f);
  const Tensor flag2 = Tensor::zeros({1}, DType::f32);
  const std::vector<Tensor> overflow = {Tensor::full({2}, DType::f16, 60000.0)};
  loom::kernels::unscale_and_check_finite(overflow, 2.0f, flag2);  // 120000 overflows f16
  CHECK(flag2.item<float>() == 1.0f);
  CHECK_THROWS_MATCHES(loom::kernels::unscale_and_check_finite(grads, 1.0f, Tensor::zeros({2}, DType::f32)), loom::Error,
                       IsError(ErrorCategory::invalid_argument, {"found_nonfinite", "(1)"}));
}

TEST_CASE("global L2 norm over many tensors matches fp64", "[kernels][grad_utils]") {
  std::mt19937 rng(53);
  std::vector<Tensor> tensors;
  double squares = 0;
  for (auto [n, dtype] : std::vector<std::pair<std::int64_t, DType>>{{1, DType::f32}, {70000, DType::f32}, {333, DType::bf16}, {0, DType::f16}}) {
    auto t = loom::test::random_tensor({n}, dtype, rng);
    for (double v : t.values) squares += v * v;
    tensors.push_back(t.tensor);
  }
  const Tensor norm = Tensor::empty({1}, DType::f32), sum = Tensor::empty({1}, DType::f32);
  loom::kernels::global_l2_norm(tensors, norm);
  loom::kernels::sum_of_squares(tensors, sum);
  CHECK(norm.item<float>() == Approx(std::sqrt(squares)).epsilon(1e-6));
  CHECK(sum.item<float>() == Approx(squares).epsilon(1e-6));
}
