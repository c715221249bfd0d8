// The GPT model on the CPU: whole-model gradients against directional finite differences of the
// loss, the gradient-ready hooks (each parameter once, in backward order, the tied embedding
// last), determinism of the initialisation, and the low-precision policies against fp32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loom/core/tensor_ops.hpp"
#include "loom/nn/gpt.hpp"
#include "support/tensor_checks.hpp"
#include "unit/nn/gradient_check.hpp"

using loom::DType;
using loom::Tensor;
using loom::nn::GPT;
using loom::nn::GPTConfig;
using loom::nn::Parameter;
using loom::nn::Precision;

namespace {

GPTConfig tiny_config() {
  GPTConfig config;
  config.vocab_size = 13;  // padded to 64
  config.context = 8;
  config.layers = 2;
  config.heads = 2;
  config.channels = 16;
  return config;
}

Tensor random_tokens(std::int64_t batch, std::int64_t steps, std::int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab - 1));
  Tensor t = Tensor::empty({batch, steps}, DType::i32);
  for (std::int32_t& v : t.span<std::int32_t>()) v = dist(rng);
  return t;
}

}  // namespace

TEST_CASE("GPT gradients match finite differences of the loss for every parameter", "[nn][gpt][gradients]") {
  std::mt19937 rng(7);
  GPT model(tiny_config(), Precision::fp32(), loom::Device::cpu(), 3);
  // Larger weights than GPT-2's initialisation so every path carries signal.
  for (Parameter* p : model.parameters()) {
    std::normal_distribution<float> dist(0.0f, 0.2f);
    for (float& v : p->value().span<float>()) v += dist(rng);
  }
  const Tensor tokens = random_tokens(2, 7, 13, rng);
  Tensor targets = random_tokens(2, 7, 13, rng);
  targets.at<std::int32_t>({0, 3}) = -1;  // ignored positions take no part
  targets.at<std::int32_t>({1, 6}) = -1;
  const float loss = model.forward(tokens, targets);
  REQUIRE(std::isfinite(loss));
  model.zero_grad();
  model.backward();
  std::vector<Tensor> grads;
  for (Parameter* p : model.parameters()) grads.push_back(p->grad().clone());
  auto objective = [&] { return static_cast<double>(model.forward(tokens, targets)); };
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Parameter& p = *model.parameters()[i];
    loom::test::require_directional(p.name(), loom::test::directional_derivative(p.value(), grads[i], objective, rng, 1e-3),
                                    5e-3, 3e-4);
  }
}

TEST_CASE("GPT gradient-ready hooks fire once per parameter, in backward order, wte last", "[nn][gpt]") {
  GPT model(tiny_config(), Precision::fp32(), loom::Device::cpu());
  std::vector<std::string> fired;
  for (Parameter* p : model.parameters()) p->add_grad_ready_hook([&](Parameter& q, loom::StreamRef) { fired.push_back(q.name()); });
  std::mt19937 rng(8);
  const Tensor tokens = random_tokens(2, 5, 13, rng), targets = random_tokens(2, 5, 13, rng);
  model.forward(tokens, targets);
  model.backward();
  REQUIRE(fired.size() == model.parameters().size());
  std::map<std::string, int> counts;
  for (const std::string& name : fired) ++counts[name];
  for (Parameter* p : model.parameters()) REQUIRE(counts[p->name()] == 1);
  auto position = [&](const std::string& name) { return std::find(fired.begin(), fired.end(), name) - fired.begin(); };
  REQUIRE(fired.back() == "wte");
  REQUIRE(position("ln_f.weight") < position("h1.mlp.proj.weight"));
  REQUIRE(position("h1.mlp.proj.weight") < position("h1.attn.qkv.weight"));
  REQUIRE(position("h1.ln1.bias") < position("h0.mlp.proj.weight"));
  REQUIRE(position("h0.ln1.weight") < position("wpe"));
}

TEST_CASE("GPT initialisation is deterministic from the seed and follows GPT-2", "[nn][gpt]") {
  GPTConfig config = tiny_config();
  config.channels = 64;
  config.layers = 3;
  GPT a(config, Precision::fp32(), loom::Device::cpu(), 5), b(config, Precision::fp32(), loom::Device::cpu(), 5),
      c(config, Precision::fp32(), loom::Device::cpu(), 6);
  REQUIRE(config.parameter_count() == [&] {
    std::int64_t n = 0;
    for (Parameter* p : a.parameters()) n += p->value().numel();
    return n;
  }());
  for (std::size_t i = 0; i < a.parameters().size(); ++i) {
    const Parameter& p = *a.parameters()[i];
    INFO(p.name());
    const std::vector<float> va = p.value().to_vector<float>();
    REQUIRE(va == b.parameters()[i]->value().to_vector<float>());
    double sum_sq = 0;
    for (float v : va) sum_sq += static_cast<double>(v) * v;
    const double rms = std::sqrt(sum_sq / static_cast<double>(va.size()));
    const std::string& name = p.name();
    if (name.ends_with(".bias")) REQUIRE(rms == 0.0);
    else if (name.starts_with("ln_f") || name.find(".ln") != std::string::npos) REQUIRE(rms == 1.0);
    else {
      REQUIRE(va != c.parameters()[i]->value().to_vector<float>());
      const double expected = name == "wpe" ? 0.01 : name.ends_with("proj.weight") ? 0.02 / std::sqrt(6.0) : 0.02;
      REQUIRE(rms == Approx(expected).epsilon(0.1));
    }
  }
}

TEST_CASE("bf16, fp16 and tf32 models give the fp32 loss and gradients within their precision", "[nn][gpt]") {
  std::mt19937 rng(9);
  const Tensor tokens = random_tokens(2, 8, 13, rng), targets = random_tokens(2, 8, 13, rng);
  GPT reference(tiny_config(), Precision::fp32(), loom::Device::cpu(), 11);
  const float reference_loss = reference.forward(tokens, targets);
  reference.backward();
  for (const Precision& precision : {Precision::tf32(), Precision::bf16(), Precision::fp16()}) {
    INFO(precision.name());
    GPT model(tiny_config(), precision, loom::Device::cpu(), 11);
    REQUIRE(model.parameters()[0]->value().dtype() == precision.storage);
    const float loss = model.forward(tokens, targets);
    REQUIRE(loss == Approx(reference_loss).epsilon(precision.storage == DType::f32 ? 1e-3 : 2e-2));
    model.backward();
    // The head's gradient (the largest) agrees to low-precision accuracy.
    const std::vector<float> g = model.parameters()[0]->grad().to_vector<float>();
    const std::vector<float> r = reference.parameters()[0]->grad().to_vector<float>();
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      diff += (static_cast<double>(g[i]) - r[i]) * (static_cast<double>(g[i]) - r[i]);
      norm += static_cast<double>(r[i]) * r[i];
    }
    REQUIRE(std::sqrt(diff / norm) < (precision.storage == DType::f32 ? 1e-3 : 5e-2));
  }
}

TEST_CASE("a GPT with fused attention trains like the stored-attention GPT", "[nn][gpt][fused]") {
  std::mt19937 rng(10);
  GPTConfig stored_config = tiny_config(), fused_config = tiny_config();
  stored_config.attention = loom::nn::AttentionKernel::stored;
  fused_config.attention = loom::nn::AttentionKernel::fused;
  // automatic: stored while one layer's probabilities fit in 512 MiB (GPT-2 at B = 16, T = 1024
  // in bf16: 384 MiB), fused beyond.
  using loom::nn::AttentionKernel;
  REQUIRE(loom::nn::resolve(AttentionKernel::automatic, 16, 12, 1024, DType::bf16) == AttentionKernel::stored);
  REQUIRE(loom::nn::resolve(AttentionKernel::automatic, 8, 12, 2048, DType::bf16) == AttentionKernel::fused);
  REQUIRE(loom::nn::resolve(AttentionKernel::fused, 1, 1, 8, DType::f32) == AttentionKernel::fused);
  GPT stored(stored_config, Precision::fp32(), loom::Device::cpu(), 12);
  GPT fused(fused_config, Precision::fp32(), loom::Device::cpu(), 12);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const Tensor tokens = random_tokens(2, 8, 13, rng), targets = random_tokens(2, 8, 13, rng);
    stored.zero_grad();
    fused.zero_grad();
    REQUIRE(fused.forward(tokens, targets) == Approx(stored.forward(tokens, targets)).epsilon(1e-5));
    stored.backward();
    fused.backward();
    for (std::size_t p = 0; p < stored.parameters().size(); ++p) {
      INFO(stored.parameters()[p]->name());
      const std::vector<float> g = fused.parameters()[p]->grad().to_vector<float>();
      const std::vector<float> r = stored.parameters()[p]->grad().to_vector<float>();
      for (std::size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(r[i]).epsilon(1e-3).margin(1e-6));
      // An SGD step on both keeps them side by side.
      const std::vector<float> w = stored.parameters()[p]->value().to_vector<float>();
      std::vector<float> updated(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) updated[i] = w[i] - 0.1f * r[i];
      loom::copy(stored.parameters()[p]->value(), Tensor::from_vector(updated, stored.parameters()[p]->value().shape()));
      loom::copy(fused.parameters()[p]->value(), Tensor::from_vector(updated, fused.parameters()[p]->value().shape()));
    }
  }
  CHECK_THROWS_MATCHES(loom::nn::parse_attention_kernel("flash"), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"flash", "auto, stored, fused"}));
}

TEST_CASE("GPT forward_into adds the loss forward returns, and ignored targets do not count", "[nn][gpt]") {
  std::mt19937 rng(13);
  GPT model(tiny_config(), Precision::fp32(), loom::Device::cpu(), 14);
  const Tensor tokens = random_tokens(2, 8, 13, rng);
  Tensor targets = random_tokens(2, 8, 13, rng);
  for (int i : {0, 5, 9}) targets.data<std::int32_t>()[i] = -1;
  const float loss = model.forward(tokens, targets);
  const Tensor sum = Tensor::from_vector(std::vector<float>{0.25f}, {1});
  model.forward_into(tokens, targets, sum);
  model.forward_into(tokens, targets, sum);
  REQUIRE(sum.item<float>() == (0.25f + loss) + loss);
  // The mean is over the 13 counted positions: the logits give the same value computed here.
  const std::vector<float> logits = model.logits().to_vector<float>();
  double expected = 0;
  for (std::int64_t r = 0; r < 16; ++r) {
    const std::int32_t t = targets.data<std::int32_t>()[r];
    if (t < 0) continue;
    double m = -INFINITY, z = 0;
    for (std::int64_t j = 0; j < 13; ++j) m = std::max(m, static_cast<double>(logits[r * 64 + j]));
    for (std::int64_t j = 0; j < 13; ++j) z += std::exp(logits[r * 64 + j] - m);
    expected += m + std::log(z) - logits[r * 64 + t];
  }
  REQUIRE(loss == Approx(expected / 13).epsilon(1e-5));
}

TEST_CASE("GPT rejects bad configs, tokens and sequence lengths with clear errors", "[nn][gpt]") {
  GPTConfig bad = tiny_config();
  bad.heads = 3;
  REQUIRE_THROWS_WITH(GPT(bad, Precision::fp32(), loom::Device::cpu()), Catch::Contains("multiple of heads 3"));
  GPT model(tiny_config(), Precision::fp32(), loom::Device::cpu());
  REQUIRE_THROWS_WITH(model.forward(Tensor::zeros({1, 9}, DType::i32)), Catch::Contains("sequence length 9"));
  REQUIRE_THROWS_WITH(model.forward(Tensor::zeros({1, 4}, DType::i64)), Catch::Contains("tokens must be [B, T] i32"));
  REQUIRE_THROWS_WITH(model.backward(), Catch::Contains("forward with targets"));
  // Host batches are range-checked before anything runs: the value and its (sequence, step).
  Tensor bad_tokens = Tensor::zeros({2, 4}, DType::i32);
  bad_tokens.data<std::int32_t>()[6] = 13;
  REQUIRE_THROWS_WITH(model.forward(bad_tokens), Catch::Contains("token 13 at position (1, 2)"));
  Tensor bad_targets = Tensor::zeros({2, 4}, DType::i32);
  bad_targets.data<std::int32_t>()[1] = -2;
  REQUIRE_THROWS_WITH(model.forward(Tensor::zeros({2, 4}, DType::i32), bad_targets),
                      Catch::Contains("target -2 at position (0, 1)"));
  REQUIRE_THROWS_WITH(Precision::parse("fp8"), Catch::Contains("unknown precision 'fp8'"));
  Precision mixed = Precision::fp32();
  mixed.storage = DType::bf16;
  REQUIRE_THROWS_WITH(GPT(tiny_config(), mixed, loom::Device::cpu()), Catch::Contains("take f32 operands"));
  // One backward per forward: the logits hold their gradient afterwards.
  std::mt19937 rng(12);
  const Tensor tokens = random_tokens(1, 4, 13, rng), targets = random_tokens(1, 4, 13, rng);
  model.forward(tokens, targets);
  model.backward();
  REQUIRE_THROWS_WITH(model.backward(), Catch::Contains("forward with targets"));
  loom::nn::Parameter& wte = *model.parameters()[0];
  REQUIRE_THROWS_WITH(wte.bind(wte.value(), Tensor::zeros(wte.shape(), DType::bf16)),
                      Catch::Contains("a gradient must be f32"));
}

TEST_CASE("GPT is causal: a position sees every earlier token and no later one", "[nn][gpt]") {
  std::mt19937 rng(10);
  GPT model(tiny_config(), Precision::fp32(), loom::Device::cpu(), 4);
  const Tensor tokens = random_tokens(1, 8, 13, rng);
  model.forward(tokens);
  const std::vector<float> base = model.logits().to_vector<float>();
  const std::int64_t vp = model.config().padded_vocab();
  for (std::int64_t changed = 0; changed < 8; ++changed) {
    Tensor other = tokens.clone();
    other.at<std::int32_t>({0, changed}) = (other.at<std::int32_t>({0, changed}) + 1) % 13;
    model.forward(other);
    const std::vector<float> logits = model.logits().to_vector<float>();
    for (std::int64_t t = 0; t < 8; ++t) {
      double diff = 0;
      for (std::int64_t v = 0; v < 13; ++v) {
        diff = std::max(diff, std::fabs(static_cast<double>(logits[t * vp + v]) - base[t * vp + v]));
      }
      INFO("token " << changed << " changed, logits at " << t << " moved by " << diff);
      if (t < changed) REQUIRE(diff == 0.0);
      else REQUIRE(diff > 1e-4);
    }
  }
}

TEST_CASE("GPT-2 124M's FLOPs per token equal the hand count, and checkpointing's recompute is counted apart",
          "[nn][gpt]") {
  loom::nn::GPTConfig gpt2{.vocab_size = 50257, .context = 1024, .layers = 12, .heads = 12, .channels = 768};
  // Parameters by hand: the token table padded to 50304 rows and the position table; per block two
  // LayerNorms (2 x 2 x 768), QKV (768 x 2304 + 2304), the projection (768 x 768 + 768), the MLP
  // (768 x 3072 + 3072, 3072 x 768 + 768); the final LayerNorm.
  const std::int64_t block = 4 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768);
  const std::int64_t parameters = 50304 * 768 + 1024 * 768 + 12 * block + 2 * 768;
  CHECK(parameters == 124475904);
  CHECK(gpt2.parameter_count() == parameters);
  // 6 FLOPs per parameter per token (forward 2, backward 4), and the attention scores and their
  // weighted sum: 2 x 2 x C x T forward per layer, x 3 with backward.
  CHECK(gpt2.training_flops_per_token(1024) == 6.0 * 124475904 + 12.0 * 12 * 768 * 1024);
  CHECK(gpt2.training_flops_per_token(1024) == 860101632.0);
  CHECK(gpt2.recompute_flops_per_token(1024) == 0);
  // Full checkpointing every second block recomputes 6 blocks' forward: 24 C^2 (QKV 6, projection
  // 2, MLP 16) and 4 C T (scores and weighted sum) each; selective every block the scores alone.
  gpt2.checkpointing = loom::nn::ActivationCheckpointing::full;
  gpt2.checkpoint_every = 2;
  CHECK(gpt2.recompute_flops_per_token(1024) == 6 * (24.0 * 768 * 768 + 4.0 * 768 * 1024));
  gpt2.checkpointing = loom::nn::ActivationCheckpointing::selective;
  gpt2.checkpoint_every = 1;
  CHECK(gpt2.recompute_flops_per_token(1024) == 12 * 2.0 * 768 * 1024);
  CHECK(gpt2.training_flops_per_token(1024) == 860101632.0);  // the model's FLOPs do not change
}
