// Activation checkpointing (nn::ActivationCheckpointing, GPTConfig::checkpointing): a block that
// keeps only its input and output and recomputes its forward inside backward (full), or keeps the
// GEMM outputs and recomputes the LayerNorms, attention probabilities and GELU (selective), gives the
// same gradients, bit for bit, as one that keeps everything, in fp32 and bf16, for every block or
// every second one; under the Trainer (fp32 and bf16) with DDP, ZeRO-2 and ZeRO-3 at 2 in-process ranks and with tensor
// parallelism, the weights after 2 steps are the same bits. The CPU allocator's peak over a forward
// and backward of a 4-layer GPT shows what it saves, and generate's forwards of other lengths leave
// no buffers behind.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/allocator.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/zero.hpp"
#include "loom/topo/mesh.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/error_message.hpp"
#include "support/tiny_gpt.hpp"

using loom::Tensor;
using loom::nn::ActivationCheckpointing;

namespace {

loom::nn::GPTConfig config(ActivationCheckpointing mode, std::int64_t every = 1) {
  loom::nn::GPTConfig c;
  c.vocab_size = 64;
  c.context = 32;
  c.layers = 4;
  c.heads = 4;
  c.channels = 64;
  c.checkpointing = mode;
  c.checkpoint_every = every;
  return c;
}

// Every parameter's bytes (values or gradients), in order.
std::vector<std::vector<unsigned char>> bytes_of(const loom::nn::GPT& model, bool gradients) {
  std::vector<std::vector<unsigned char>> out;
  for (const loom::model::Parameter* p : model.parameters()) {
    const Tensor t = gradients ? p->grad() : p->value();
    const auto* b = static_cast<const unsigned char*>(t.raw_data());
    out.emplace_back(b, b + t.nbytes());
  }
  return out;
}

struct Pass {
  float loss = 0;
  std::vector<std::vector<unsigned char>> grads;
  std::int64_t peak = 0;  // activation bytes at the peak of a forward and backward (buffers kept between steps too)
  std::int64_t live = 0, live_again = 0;  // live bytes after the pass, and after generate and another pass
};

Pass forward_backward(const loom::nn::GPTConfig& c, const loom::nn::Precision& precision) {
  loom::nn::GPT model(c, precision, loom::Device::cpu(), 21);
  const std::int64_t model_state = loom::cpu_memory_stats().live_bytes;  // (and whatever was live before)
  std::vector<std::int32_t> tokens(8 * 32), targets(8 * 32);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 13 + 5) % 64);
    targets[i] = static_cast<std::int32_t>((i * 7 + 1) % 64);
  }
  const Tensor x = Tensor::from_vector(tokens, {8, 32}), y = Tensor::from_vector(targets, {8, 32});
  Pass pass;
  // The second of two passes is measured (the layers' buffers exist from the first under none).
  for (int round = 0; round < 2; ++round) {
    model.zero_grad();
    loom::reset_cpu_memory_peak();
    pass.loss = model.forward(x, y);
    model.backward();
    pass.peak = loom::cpu_memory_stats().peak_bytes - model_state;
  }
  pass.grads = bytes_of(model, true);
  pass.live = loom::cpu_memory_stats().live_bytes;
  // Forwards of other shapes (generate's growing window) leave nothing behind once training goes on.
  loom::nn::generate(model, {{1, 2, 3}}, {.max_new_tokens = 12});
  model.zero_grad();
  model.forward(x, y);
  model.backward();
  pass.live_again = loom::cpu_memory_stats().live_bytes;
  return pass;
}

}  // namespace

TEST_CASE("full activation checkpointing gives the same gradients bit for bit and a lower peak",
          "[nn][gpt][checkpointing]") {
  for (const auto& precision : {loom::nn::Precision::fp32(), loom::nn::Precision::bf16()}) {
    INFO(precision.name());
    const Pass none = forward_backward(config(ActivationCheckpointing::none), precision);
    const Pass full = forward_backward(config(ActivationCheckpointing::full), precision);
    const Pass every_other = forward_backward(config(ActivationCheckpointing::full, 2), precision);
    const Pass selective = forward_backward(config(ActivationCheckpointing::selective), precision);
    const Pass selective_every_other = forward_backward(config(ActivationCheckpointing::selective, 2), precision);
    CHECK(full.loss == none.loss);
    CHECK(selective.loss == none.loss);
    CHECK(full.grads == none.grads);
    CHECK(every_other.grads == none.grads);
    CHECK(selective.grads == none.grads);
    CHECK(selective_every_other.grads == none.grads);
    for (const Pass* p : {&none, &full, &every_other, &selective, &selective_every_other}) CHECK(p->live_again == p->live);
    // The peak of a forward and backward (activations, logits and the layers' buffers) at B = 8,
    // T = 32, C = 64, 4 layers: full keeps one block's buffers at a time instead of four; selective
    // keeps 10 of a block's 35 [B, T, C]-sized buffers (QKV, heads, pre-activation, residual stream)
    // and hands the backward buffers on from block to block.
    INFO("peak: none " << none.peak << " B, full " << full.peak << " B, every other block " << every_other.peak
                       << " B, selective " << selective.peak << " B");
    CHECK(static_cast<double>(full.peak) <= 0.4 * static_cast<double>(none.peak));  // measured 0.30
    CHECK(static_cast<double>(selective.peak) <= 0.55 * static_cast<double>(none.peak));  // measured 0.45
    CHECK(every_other.peak < none.peak);
    CHECK(full.peak < every_other.peak);
    CHECK(full.peak < selective.peak);
    CHECK(selective.peak < selective_every_other.peak);
  }
}

TEST_CASE("activation checkpointing under DDP, ZeRO-2, ZeRO-3 and tensor parallelism trains to the same bits",
          "[train][gpt][checkpointing]") {
  struct Layout {
    int tensor, zero;
  };
  for (const auto& precision : {loom::nn::Precision::fp32(), loom::nn::Precision::bf16()})
  for (const Layout layout : {Layout{1, 0}, Layout{1, 2}, Layout{1, 3}, Layout{2, 0}}) {
    INFO(precision.name() << ", 2 ranks, tensor " << layout.tensor << ", ZeRO-" << layout.zero);
    std::vector<std::vector<std::vector<unsigned char>>> weights(3);
    for (const ActivationCheckpointing mode :
         {ActivationCheckpointing::none, ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
      std::vector<std::string> problems(2);
      loom::comm::run_in_process(2, [&](loom::comm::Communicator& world) {
        const loom::topo::DeviceMesh mesh(world, {.tensor = layout.tensor});
        loom::nn::GPTConfig c = loom::test::tiny_gpt(32, 8);
        c.checkpointing = mode;
        loom::nn::GPT model(c, precision, loom::Device::cpu(), 3, loom::shard::space_layout(layout.zero, &mesh.data()),
                            &mesh.tensor());
        const int data_ranks = mesh.shape().data, d = mesh.coords().data;
        loom::test::GlobalBatchSlice data(4, 4 * d / data_ranks, 4 / data_ranks);
        loom::train::Trainer trainer(model, data, loom::test::tiny_trainer_options(layout.zero),
                                     {&world, &mesh.data(), &mesh.tensor()});
        trainer.step();
        trainer.step();
        if (layout.zero == 3) trainer.zero_engine()->unshard_values();
        if (world.rank() == 1) weights[static_cast<std::size_t>(mode)] = bytes_of(model, false);
      });
    }
    CHECK(weights[1] == weights[0]);
    CHECK(weights[2] == weights[0]);
  }
}

TEST_CASE("activation checkpointing settings are checked by name", "[nn][checkpointing]") {
  CHECK(loom::nn::parse_activation_checkpointing("full") == ActivationCheckpointing::full);
  CHECK(loom::nn::to_string(ActivationCheckpointing::none) == "none");
  CHECK(loom::nn::parse_activation_checkpointing("selective") == ActivationCheckpointing::selective);
  CHECK(loom::nn::to_string(ActivationCheckpointing::selective) == "selective");
  CHECK_THAT(loom::test::error_message([] { loom::nn::parse_activation_checkpointing("partial"); }),
             Catch::Contains("'partial' is not one of none, selective, full"));
  loom::nn::GPTConfig c = config(ActivationCheckpointing::full, 0);
  CHECK_THAT(loom::test::error_message([&] { c.validate(); }), Catch::Contains("checkpoint_every must be positive"));
}
