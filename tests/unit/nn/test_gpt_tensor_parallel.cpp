// nn::GPT split over a tensor group of in-process ranks (attention by heads, the MLP column then
// row, the embedding and head by vocabulary) against the same GPT in one process, fp32: the
// loss, every rank's block of the logits and of every parameter's gradient after one forward and
// backward (1e-5 relative to the tensor's largest value), the tokens generate() picks, and under
// the Trainer, composed with DDP and ZeRO-1, 2 and 3 over the data dimension, the losses of 3 steps
// and the weights after them (2e-6 absolute: AdamW's steps are lr-sized whatever the gradient). The vocabulary, 37 ids padded to 64, does not divide by the
// tensor group: at TP 4 rank 2 holds 5 real ids and rank 3 padding only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/model/parameter.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/zero.hpp"
#include "loom/topo/mesh.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/tensor_checks.hpp"
#include "support/tiny_gpt.hpp"

using loom::Tensor;

namespace {

loom::nn::GPTConfig config() {
  loom::nn::GPTConfig c;
  c.vocab_size = 37;
  c.context = 8;
  c.layers = 2;
  c.heads = 4;
  c.channels = 32;
  return c;
}

constexpr std::uint64_t seed = 11;

// Tokens [2, 8] below 32 and targets with two ignored positions.
std::pair<Tensor, Tensor> batch() {
  std::vector<std::int32_t> tokens(16), targets(16);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % 32);
    targets[i] = static_cast<std::int32_t>((i * 11 + 5) % 37);
  }
  targets[3] = targets[12] = -1;
  return {Tensor::from_vector(tokens, {2, 8}), Tensor::from_vector(targets, {2, 8})};
}

// Where each local element of a parameter sits in its global tensor (row-major index).
std::vector<std::int64_t> global_indices(const loom::model::Parameter& p) {
  const loom::model::Partition& partition = p.partition();
  std::vector<std::int64_t> out;
  for (const loom::model::Box& box : loom::model::boxes(partition, p.shape())) {
    const std::int64_t rank = box.extent.rank();
    for (std::int64_t k = 0; k < box.extent.numel(); ++k) {
      std::int64_t rest = k, index = 0, stride = 1;
      for (std::int64_t d = rank - 1; d >= 0; --d) {
        index += (rest % box.extent[d] + box.offset[static_cast<std::size_t>(d)]) * stride;
        rest /= box.extent[d];
        stride *= partition.global[d];
      }
      out.push_back(index);
    }
  }
  return out;
}

// "" when every local element is within tolerance x max(floor, the whole tensor's largest |value|)
// of the reference's element it stands for; else what differs.
std::string compare(const std::string& what, const loom::model::Parameter& p, const Tensor& local,
                    const std::vector<float>& whole, double tolerance, double floor = 0) {
  double scale = floor;
  for (const float v : whole) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const std::vector<float> mine = local.to_vector<float>();
  const std::vector<std::int64_t> at = global_indices(p);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const double want = whole[static_cast<std::size_t>(at[k])];
    if (std::fabs(mine[k] - want) > tolerance * scale) {
      return what + " of " + p.name() + " differs at local " + std::to_string(k) + ": " + std::to_string(mine[k] - want) +
             " from " + std::to_string(want) + "; ";
    }
  }
  return "";
}

std::string within(const char* what, double got, double want, double tolerance) {
  return std::fabs(got - want) <= tolerance * std::fabs(want) ? std::string()
                                                              : std::string(what) + " " + std::to_string(got) + " vs " +
                                                                    std::to_string(want) + "; ";
}

}  // namespace

TEST_CASE("a GPT split over 2 or 4 tensor ranks computes one process's loss, logits and gradients",
          "[nn][gpt][tensor_parallel]") {
  const auto [tokens, targets] = batch();
  loom::nn::GPT whole(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed);
  const float loss = whole.forward(tokens, targets);
  const std::vector<float> logits = whole.logits().to_vector<float>();
  whole.backward();
  std::vector<std::vector<float>> grads, values;
  for (const loom::model::Parameter* p : whole.parameters()) {
    grads.push_back(p->grad().to_vector<float>());
    values.push_back(p->value().to_vector<float>());
  }
  const std::int64_t padded = config().padded_vocab();
  for (const int ranks : {2, 4}) {
    INFO("TP " << ranks);
    std::vector<std::string> problems(static_cast<std::size_t>(ranks));
    loom::comm::run_in_process(ranks, [&](loom::comm::Communicator& tensor) {
      loom::nn::GPT model(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed, {}, &tensor);
      std::string& problem = problems[static_cast<std::size_t>(tensor.rank())];
      problem += within("loss", model.forward(tokens, targets), loss, 1e-5);
      // This rank's columns of the logits.
      const loom::nn::VocabBlock& block = model.vocab_block();
      const std::vector<float> mine = model.logits().to_vector<float>();
      double scale = 0;
      for (const float v : logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      for (std::size_t k = 0; k < mine.size(); ++k) {
        const std::int64_t row = static_cast<std::int64_t>(k) / block.rows, column = block.first + static_cast<std::int64_t>(k) % block.rows;
        if (std::fabs(mine[k] - logits[static_cast<std::size_t>(row * padded + column)]) > 1e-5 * scale) {
          problem += "logit " + std::to_string(k) + "; ";
          break;
        }
      }
      model.backward();
      const auto& parameters = model.parameters();
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        problem += compare("gradient", *parameters[i], parameters[i]->grad(), grads[i], 1e-5);
      }
      // Initialised as one process is: each block holds the whole's values, bit for bit.
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        problem += compare("initial value", *parameters[i], parameters[i]->value(), values[i], 0.0);
      }
    });
    CHECK(problems == std::vector<std::string>(static_cast<std::size_t>(ranks)));
  }
}

TEST_CASE("generate under tensor parallelism picks one process's tokens on every rank", "[nn][gpt][tensor_parallel]") {
  const std::vector<std::vector<std::int32_t>> prompts{{1, 2, 3}, {30, 4, 17}};
  loom::nn::GPT whole(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed);
  const auto want = loom::nn::generate(whole, prompts, {.max_new_tokens = 10});
  const auto sampled = loom::nn::generate(whole, prompts, {.max_new_tokens = 6, .temperature = 0.9f, .seed = 4});
  std::vector<int> same(2, 0);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& tensor) {
    loom::nn::GPT model(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed, {}, &tensor);
    const bool greedy = loom::nn::generate(model, prompts, {.max_new_tokens = 10}) == want;
    const bool sampling =
        loom::nn::generate(model, prompts, {.max_new_tokens = 6, .temperature = 0.9f, .seed = 4}) == sampled;
    same[static_cast<std::size_t>(tensor.rank())] = greedy && sampling ? 1 : 0;
  });
  CHECK(same == std::vector<int>{1, 1});
}

TEST_CASE("a GPT that does not split over the tensor group is refused by name", "[nn][gpt][tensor_parallel]") {
  std::vector<std::string> errors(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& tensor) {
    std::string& error = errors[static_cast<std::size_t>(tensor.rank())];
    loom::nn::GPTConfig c = config();
    c.heads = 3;
    c.channels = 24;
    try {
      loom::nn::GPT model(c, loom::nn::Precision::fp32(), loom::Device::cpu(), seed, {}, &tensor);
    } catch (const loom::Error& e) {
      error = e.what();
    }
  });
  // 3 heads divide over 3 ranks, but the padded vocabulary of 64 does not.
  for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("64 does not divide into 3 blocks"));
  std::vector<std::string> heads(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& tensor) {
    loom::nn::GPTConfig c = config();
    c.heads = 1;
    try {
      loom::nn::GPT model(c, loom::nn::Precision::fp32(), loom::Device::cpu(), seed, {}, &tensor);
    } catch (const loom::Error& e) {
      heads[static_cast<std::size_t>(tensor.rank())] = e.what();
    }
  });
  for (const std::string& e : heads) CHECK_THAT(e, Catch::Contains("1 heads do not divide over the 2 ranks"));
}

TEST_CASE("GPT under tensor parallelism with DDP and ZeRO-1, 2 and 3 trains as one process does",
          "[train][gpt][tensor_parallel]") {
  constexpr int steps = 3, global_rows = 4;
  auto options = [](int zero) {
    loom::train::TrainerOptions o = loom::test::tiny_trainer_options(zero);
    // eps 1e-6, not 1e-8: where a gradient is near zero (k's bias has none: the softmax ignores it)
    // AdamW's first steps are about +-lr whatever its size, so a rounding error's sign would set
    // them; at TP 4 one v weight moved 3e-6 apart at 1e-8. What is tested is the model's arithmetic.
    o.adamw.eps = 1e-6f;
    o.max_grad_norm = 0.5f;  // tight: the update depends on the global norm over both dimensions
    return o;
  };
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  {
    loom::nn::GPT model(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed);
    loom::test::GlobalBatchSlice data(global_rows, 0, global_rows);
    loom::train::Trainer trainer(model, data, options(0));
    for (int s = 0; s < steps; ++s) losses.push_back(trainer.step().loss);
    for (const loom::model::Parameter* p : model.parameters()) weights.push_back(p->value().to_vector<float>());
  }
  struct Layout {
    int world, tensor, zero;
  };
  for (const Layout layout : {Layout{2, 2, 0}, Layout{4, 2, 0}, Layout{4, 2, 1}, Layout{4, 2, 2}, Layout{4, 2, 3}, Layout{2, 2, 3},
                              Layout{4, 4, 0}}) {
    INFO("world " << layout.world << ", tensor " << layout.tensor << ", ZeRO-" << layout.zero);
    std::vector<std::string> problems(static_cast<std::size_t>(layout.world));
    loom::comm::run_in_process(layout.world, [&](loom::comm::Communicator& world) {
      const loom::topo::DeviceMesh mesh(world, {.tensor = layout.tensor});
      loom::nn::GPT model(config(), loom::nn::Precision::fp32(), loom::Device::cpu(), seed,
                          loom::shard::space_layout(layout.zero, &mesh.data()), &mesh.tensor());
      const int data_ranks = mesh.shape().data, d = mesh.coords().data;
      loom::test::GlobalBatchSlice data(global_rows, global_rows * d / data_ranks, global_rows / data_ranks);
      loom::train::Trainer trainer(model, data, options(layout.zero), {&world, &mesh.data(), &mesh.tensor()});
      std::string& problem = problems[static_cast<std::size_t>(world.rank())];
      for (int s = 0; s < steps; ++s) problem += within("loss", trainer.step().loss, losses[static_cast<std::size_t>(s)], 1e-5);
      if (layout.zero == 3) trainer.zero_engine()->unshard_values();
      const auto& parameters = model.parameters();
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        problem += compare("weight", *parameters[i], parameters[i]->value(), weights[i], 2e-6, 1.0);
      }
    });
    CHECK(problems == std::vector<std::string>(static_cast<std::size_t>(layout.world)));
  }
}
