// plan::predict_activations against what loom's CPU allocator measures: the peak of the
// `activations` category over a forward and backward of a GPT (the second pass, when the layers'
// buffers exist), for configurations of other widths, sequence lengths, batches and
// checkpointing modes than the fit was made on (fp32 and bf16, every block or every second one),
// and per rank under tensor parallelism 2 (two in-process ranks share the allocator: half of it).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/allocator.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/plan/activations.hpp"

namespace {

using loom::Tensor;
using loom::nn::ActivationCheckpointing;

constexpr auto activations = static_cast<std::size_t>(loom::MemoryCategory::activations);

struct Case {
  std::int64_t layers, heads, channels, context, vocab, batch;
  ActivationCheckpointing mode;
  std::int64_t every;
  bool bf16;
};

loom::nn::GPTConfig config_of(const Case& c) {
  loom::nn::GPTConfig m;
  m.layers = c.layers;
  m.heads = c.heads;
  m.channels = c.channels;
  m.context = c.context;
  m.vocab_size = c.vocab;
  m.checkpointing = c.mode;
  m.checkpoint_every = c.every;
  return m;
}

// The activations category after two forward and backward passes: its peak over the second (reset:
// this process runs one model), or what is live after it (the layers keep their buffers).
std::int64_t measure(loom::nn::GPT& model, const Case& c, bool reset) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(c.batch * c.context)), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 13 + 5) % static_cast<std::size_t>(c.vocab));
    targets[i] = static_cast<std::int32_t>((i * 7 + 1) % static_cast<std::size_t>(c.vocab));
  }
  const Tensor x = Tensor::from_vector(tokens, {c.batch, c.context}), y = Tensor::from_vector(targets, {c.batch, c.context});
  for (int round = 0; round < 2; ++round) {
    model.zero_grad();
    if (reset) loom::reset_cpu_memory_peak();
    model.forward(x, y);
    model.backward();
  }
  return reset ? loom::cpu_memory_stats().peak_by_category[activations]
               : loom::cpu_memory_stats().live_by_category[activations];
}

}  // namespace

TEST_CASE("the activation model is within 10% of the measured activation peak", "[plan][checkpointing]") {
  const std::vector<Case> cases{
      {3, 6, 96, 48, 300, 6, ActivationCheckpointing::none, 1, false},
      {5, 4, 160, 40, 128, 3, ActivationCheckpointing::selective, 1, true},
      {4, 2, 192, 96, 100, 2, ActivationCheckpointing::full, 2, false},
      {6, 8, 256, 24, 512, 5, ActivationCheckpointing::selective, 3, false},
  };
  for (const Case& c : cases) {
    const loom::nn::Precision precision = c.bf16 ? loom::nn::Precision::bf16() : loom::nn::Precision::fp32();
    const loom::nn::GPTConfig m = config_of(c);
    const std::int64_t base = loom::cpu_memory_stats().live_by_category[activations];
    std::int64_t measured = 0;
    {
      loom::nn::GPT model(m, precision, loom::Device::cpu(), 3);
      measured = measure(model, c, true) - base;
    }
    const loom::plan::ActivationBytes predicted = loom::plan::predict_activations(
        {.model = m, .batch = c.batch, .steps = c.context, .storage_bytes = c.bf16 ? 2 : 4, .tensor = 1, .cpu = true});
    INFO("width " << c.channels << ", T " << c.context << ", " << loom::nn::to_string(c.mode) << " every " << c.every
                  << (c.bf16 ? ", bf16" : ", fp32") << ": measured " << measured << " B, predicted " << predicted.total());
    CHECK(std::abs(static_cast<double>(predicted.total()) / static_cast<double>(measured) - 1) <= 0.10);
  }
}

TEST_CASE("the activation model is within 10% per rank under tensor parallelism 2", "[plan][checkpointing]") {
  for (const ActivationCheckpointing mode :
       {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
    const Case c{3, 4, 128, 48, 200, 4, mode, 1, false};
    const loom::nn::GPTConfig m = config_of(c);
    const std::int64_t base = loom::cpu_memory_stats().live_by_category[activations];
    std::int64_t measured = 0;
    loom::comm::run_in_process(2, [&](loom::comm::Communicator& tensor) {
      loom::nn::GPT model(m, loom::nn::Precision::fp32(), loom::Device::cpu(), 3, {}, &tensor);
      measure(model, c, false);
      tensor.barrier().wait();
      if (tensor.rank() == 0) measured = (loom::cpu_memory_stats().live_by_category[activations] - base) / 2;
      tensor.barrier().wait();
    });
    const loom::plan::ActivationBytes predicted = loom::plan::predict_activations(
        {.model = m, .batch = c.batch, .steps = c.context, .storage_bytes = 4, .tensor = 2, .cpu = true});
    INFO(loom::nn::to_string(mode) << ": measured " << measured << " B per rank, predicted " << predicted.total());
    CHECK(std::abs(static_cast<double>(predicted.total()) / static_cast<double>(measured) - 1) <= 0.10);
  }
}

TEST_CASE("the activation model names bad input", "[plan]") {
  loom::nn::GPTConfig m;
  m.heads = 4;
  CHECK_THROWS_WITH(loom::plan::predict_activations({.model = m, .batch = 0}), Catch::Contains("micro-batch must be positive"));
  CHECK_THROWS_WITH(loom::plan::predict_activations({.model = m, .batch = 1, .tensor = 3}),
                    Catch::Contains("3 tensor-parallel ranks do not divide 4 heads"));
}
