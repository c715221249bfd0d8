// Optimizers and their helpers on the CPU: AdamW against a double-precision reference written
// here (weight decay only where asked, grad_scale, bias correction), fp32 master weights for bf16
// parameters, the cosine schedule at its defining points, the dynamic loss scaler's state
// machine, and global-norm clipping against fp64.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "loom/core/numeric.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/model/parameter_space.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/optim/clip.hpp"
#include "loom/optim/loss_scaler.hpp"
#include "loom/optim/schedule.hpp"
#include "loom/optim/sgd.hpp"
#include "loom/optim/state_io.hpp"

using loom::DType;
using loom::Tensor;
using loom::model::Parameter;
using loom::model::ParameterSpace;

namespace {

// One unit holding the parameters (ranks: the padding of the layout).
std::unique_ptr<ParameterSpace> space_of(std::vector<Parameter*> parameters, int ranks = 1) {
  return std::make_unique<ParameterSpace>(std::vector<loom::model::UnitSpec>{{"all", std::move(parameters)}}, ranks);
}

std::unique_ptr<Parameter> random_parameter(const char* name, std::int64_t n, DType dtype, bool decay,
                                            std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor value = Tensor::empty({n}, DType::f32);
  for (float& v : value.span<float>()) v = dist(rng);
  if (dtype == DType::bf16) {
    Tensor stored = Tensor::empty({n}, DType::bf16);
    for (std::int64_t i = 0; i < n; ++i) stored.data<loom::bfloat16>()[i] = loom::to_bfloat16(value.data<float>()[i]);
    value = stored;
  }
  auto p = std::make_unique<Parameter>(name, value, DType::f32, decay);
  for (float& g : p->grad().span<float>()) g = dist(rng);
  return p;
}

std::vector<double> as_double(const Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == DType::bf16) {
    for (loom::bfloat16 v : t.span<loom::bfloat16>()) out.push_back(loom::to_float(v));
  } else {
    for (float v : t.span<float>()) out.push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("AdamW follows the decoupled-weight-decay update, with decay only where asked", "[optim]") {
  std::mt19937 rng(1);
  auto weight = random_parameter("w", 37, DType::f32, true, rng);
  auto bias = random_parameter("b", 5, DType::f32, false, rng);
  loom::optim::AdamWOptions options;
  options.weight_decay = 0.1f;
  const auto space = space_of({weight.get(), bias.get()});
  loom::optim::AdamW adamw(*space, options);
  const double lr = 1e-2, scale = 0.5, b1 = options.beta1, b2 = options.beta2, eps = options.eps;
  std::vector<std::vector<double>> p = {as_double(weight->value()), as_double(bias->value())};
  std::vector<std::vector<double>> m(2), v(2);
  for (int i = 0; i < 2; ++i) m[i].assign(p[i].size(), 0.0), v[i].assign(p[i].size(), 0.0);
  for (int step = 1; step <= 3; ++step) {
    Parameter* params[] = {weight.get(), bias.get()};
    for (int i = 0; i < 2; ++i) {
      const std::vector<double> g = as_double(params[i]->grad());
      for (std::size_t j = 0; j < p[i].size(); ++j) {
        const double gj = g[j] * scale;
        m[i][j] = b1 * m[i][j] + (1 - b1) * gj;
        v[i][j] = b2 * v[i][j] + (1 - b2) * gj * gj;
        const double m_hat = m[i][j] / (1 - std::pow(b1, step)), v_hat = v[i][j] / (1 - std::pow(b2, step));
        if (params[i]->weight_decay()) p[i][j] *= 1 - lr * options.weight_decay;
        p[i][j] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
    }
    adamw.step(static_cast<float>(lr), static_cast<float>(scale));
    for (int i = 0; i < 2; ++i) {
      const std::vector<double> got = as_double(params[i]->value());
      for (std::size_t j = 0; j < got.size(); ++j) REQUIRE(got[j] == Approx(p[i][j]).epsilon(1e-5).margin(1e-6));
    }
  }
  REQUIRE(adamw.steps_taken() == 3);
  REQUIRE_FALSE(adamw.master(0).defined());
  REQUIRE(adamw.state_tensors().size() == 4);  // two moments per parameter, no masters
}

TEST_CASE("AdamW keeps fp32 master weights for bf16 parameters and rewrites them rounded", "[optim]") {
  std::mt19937 rng(2);
  auto low = random_parameter("w", 64, DType::bf16, true, rng);
  // The same starting values and gradients in fp32.
  auto full = std::make_unique<Parameter>("w", Tensor::empty({64}, DType::f32), DType::f32, true);
  for (std::int64_t i = 0; i < 64; ++i) {
    full->value().data<float>()[i] = loom::to_float(low->value().data<loom::bfloat16>()[i]);
    full->grad().data<float>()[i] = low->grad().data<float>()[i];
  }
  const auto low_space = space_of({low.get()}), full_space = space_of({full.get()});
  loom::optim::AdamW a(*low_space, {}), b(*full_space, {});
  for (int step = 0; step < 4; ++step) {
    a.step(1e-3f);
    b.step(1e-3f);
  }
  const Tensor& master = a.master(0);
  REQUIRE(master.dtype() == DType::f32);
  REQUIRE(master.to_vector<float>() == full->value().to_vector<float>());  // the same fp32 arithmetic
  for (std::int64_t i = 0; i < 64; ++i) {
    REQUIRE(low->value().data<loom::bfloat16>()[i].bits == loom::to_bfloat16(master.data<float>()[i]).bits);
  }
}

TEST_CASE("SGD with momentum, dampening, Nesterov and L2 decay follows PyTorch's rules", "[optim]") {
  for (bool nesterov : {false, true}) {
    INFO("nesterov " << nesterov);
    std::mt19937 rng(6);
    auto weight = random_parameter("w", 23, DType::f32, true, rng);
    auto bias = random_parameter("b", 4, DType::f32, false, rng);
    const loom::optim::SgdOptions options{.momentum = 0.8f, .dampening = nesterov ? 0.0f : 0.25f,
                                          .weight_decay = 0.05f, .nesterov = nesterov};
    const auto space = space_of({weight.get(), bias.get()});
    loom::optim::SGD sgd(*space, options);
    Parameter* params[] = {weight.get(), bias.get()};
    std::vector<std::vector<double>> p = {as_double(weight->value()), as_double(bias->value())}, buf(2);
    const double lr = 0.1, scale = 2.0;
    for (int step = 1; step <= 3; ++step) {
      for (int i = 0; i < 2; ++i) {
        const std::vector<double> g0 = as_double(params[i]->grad());
        buf[i].resize(p[i].size());
        for (std::size_t j = 0; j < p[i].size(); ++j) {
          double g = g0[j] * scale;
          if (params[i]->weight_decay()) g += options.weight_decay * p[i][j];
          buf[i][j] = step == 1 ? g : options.momentum * buf[i][j] + (1 - options.dampening) * g;
          const double update = nesterov ? g + options.momentum * buf[i][j] : buf[i][j];
          p[i][j] -= lr * update;
        }
      }
      sgd.step(static_cast<float>(lr), static_cast<float>(scale));
      for (int i = 0; i < 2; ++i) {
        const std::vector<double> got = as_double(params[i]->value());
        for (std::size_t j = 0; j < got.size(); ++j) REQUIRE(got[j] == Approx(p[i][j]).epsilon(1e-5).margin(1e-6));
      }
    }
    REQUIRE(sgd.state_tensors().size() == 2);  // one momentum buffer per parameter
  }
  std::mt19937 rng(7);
  auto lone = random_parameter("w", 3, DType::f32, true, rng);
  const auto space = space_of({lone.get()});
  REQUIRE_THROWS_WITH(loom::optim::SGD(*space, {.momentum = 0.0f, .nesterov = true}), Catch::Contains("Nesterov"));
}

TEST_CASE("cosine schedule: linear warmup, cosine decay, floor", "[optim]") {
  const loom::optim::CosineSchedule s{.max_lr = 1.0f, .min_lr = 0.1f, .warmup = 10, .total = 110};
  REQUIRE(s.at(0) == Approx(0.1));
  REQUIRE(s.at(9) == Approx(1.0));
  REQUIRE(s.at(10) == Approx(1.0));
  REQUIRE(s.at(60) == Approx(0.55));
  REQUIRE(s.at(110) == Approx(0.1));
  REQUIRE(s.at(500) == Approx(0.1));
  const loom::optim::CosineSchedule bad{.max_lr = 1.0f, .min_lr = 0.1f, .warmup = 20, .total = 10};
  REQUIRE_THROWS_WITH(bad.at(0), Catch::Contains("warmup 20") && Catch::Contains("total 10"));
  // No length: refused by name, never a silent decay to min_lr after the first step.
  const loom::optim::CosineSchedule unset{.max_lr = 1.0f, .min_lr = 0.1f};
  REQUIRE_THROWS_WITH(unset.at(0), Catch::Contains("no length (total = 0)") &&
                                       Catch::Contains("number of optimizer steps of the run"));
}

TEST_CASE("dynamic loss scaler: 2^16 start, x2 after 2000 clean steps, x0.5 and a skip on overflow", "[optim]") {
  loom::optim::DynamicLossScaler scaler;
  REQUIRE(scaler.scale() == 65536.0f);
  for (int i = 0; i < 1999; ++i) scaler.update(true);
  REQUIRE(scaler.scale() == 65536.0f);
  scaler.update(true);
  REQUIRE(scaler.scale() == 131072.0f);
  scaler.update(false);
  REQUIRE(scaler.scale() == 65536.0f);
  REQUIRE(scaler.skipped_steps() == 1);
  REQUIRE(scaler.clean_steps_in_a_row() == 0);

  std::mt19937 rng(3);
  auto p = random_parameter("w", 8, DType::f32, true, rng);
  const std::vector<float> before = p->grad().to_vector<float>();
  const std::vector<Tensor> grads{p->grad()};
  REQUIRE(scaler.unscale_and_update(grads));
  for (std::size_t i = 0; i < before.size(); ++i) REQUIRE(p->grad().data<float>()[i] == before[i] / 65536.0f);
  p->grad().data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_FALSE(scaler.unscale_and_update(grads));
  REQUIRE(scaler.scale() == 32768.0f);
  REQUIRE(scaler.skipped_steps() == 2);

  loom::optim::DynamicLossScaler disabled({.enabled = false});
  REQUIRE(disabled.scale() == 1.0f);
  REQUIRE(disabled.unscale_and_update(grads));  // bf16/fp32: never skips
}

TEST_CASE("global gradient norm matches fp64 and the clip factor caps it", "[optim]") {
  std::mt19937 rng(4);
  auto a = random_parameter("a", 100, DType::f32, true, rng);
  auto b = random_parameter("b", 7, DType::f32, false, rng);
  double sum = 0;
  for (Parameter* p : {a.get(), b.get()}) {
    for (float g : p->grad().to_vector<float>()) sum += static_cast<double>(g) * g;
  }
  const std::vector<Tensor> grads{a->grad(), b->grad()};
  const float norm = loom::optim::global_grad_norm(grads, nullptr, 0.5f);
  REQUIRE(norm == Approx(0.5 * std::sqrt(sum)).epsilon(1e-6));
  REQUIRE(loom::optim::clip_factor(norm, norm * 2) == 1.0f);
  REQUIRE(loom::optim::clip_factor(4.0f, 1.0f) == Approx(0.25));
  REQUIRE(loom::optim::clip_factor(4.0f, 0.0f) == 1.0f);
}

TEST_CASE("optimizers over the shards of a space update exactly what one over the whole space does", "[optim][zero]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool adamw : {true, false}) {
      INFO(loom::dtype_name(dtype) << (adamw ? " AdamW" : " SGD"));
      // Two identical models: one updated whole, one by three optimizers over the shards of a
      // 3-rank layout (parameter boundaries fall inside shards, and one parameter spans two).
      std::mt19937 rng_a(9), rng_b(9);
      std::vector<std::unique_ptr<Parameter>> whole_params, shard_params;
      const char* names[] = {"p0", "p1", "p2"};
      const std::int64_t sizes[] = {70, 5, 250};
      for (int i = 0; i < 3; ++i) {
        whole_params.push_back(random_parameter(names[i], sizes[i], dtype, i != 1, rng_a));
        shard_params.push_back(random_parameter(names[i], sizes[i], dtype, i != 1, rng_b));
      }
      const auto whole_space = space_of({whole_params[0].get(), whole_params[1].get(), whole_params[2].get()}, 3);
      const auto sharded_space = space_of({shard_params[0].get(), shard_params[1].get(), shard_params[2].get()}, 3);
      auto make = [&](ParameterSpace& space, std::vector<loom::model::ShardRange> ranges)
          -> std::unique_ptr<loom::optim::Optimizer> {
        if (adamw) return std::make_unique<loom::optim::AdamW>(space, loom::optim::AdamWOptions{}, std::move(ranges));
        return std::make_unique<loom::optim::SGD>(space, loom::optim::SgdOptions{}, std::move(ranges));
      };
      const auto whole = make(*whole_space, {});
      std::vector<std::unique_ptr<loom::optim::Optimizer>> shards;
      for (int r = 0; r < 3; ++r) shards.push_back(make(*sharded_space, sharded_space->shard(r)));
      CHECK(shards[0]->sharded());
      CHECK_FALSE(whole->sharded());
      CHECK(shards[1]->local_elements() == sharded_space->elements() / 3);
      for (int step = 0; step < 3; ++step) {
        whole->step(1e-2f, 0.5f);
        for (auto& shard : shards) shard->step(1e-2f, 0.5f);
      }
      CHECK(loom::to_doubles(sharded_space->values()) == loom::to_doubles(whole_space->values()));
      // Each shard's state scattered from the whole optimizer's equals what it computed.
      const std::vector<loom::optim::StateTensor> full = whole->state_tensors();
      std::map<std::string, Tensor> by_name;
      for (const auto& t : full) by_name[t.name] = t.tensor;
      for (auto& shard : shards) {
        std::vector<std::vector<double>> computed;
        for (const std::string& kind : shard->state_kinds()) computed.push_back(loom::to_doubles(shard->state(kind)));
        loom::optim::scatter_state(*shard, by_name);
        for (std::size_t k = 0; k < computed.size(); ++k) {
          CHECK(loom::to_doubles(shard->state(shard->state_kinds()[k])) == computed[k]);
        }
      }
    }
  }
}
