// The ZeRO engine's own contracts: GPT's unit hooks in forward and backward order, ZeRO-2's
// gradient pool staying small (its buffers sized to their units, at most three) through steps with
// accumulation, the model usable without the engine afterwards, and misuse refused by name.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/ddp/comm_hook.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/zero.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/tensor_checks.hpp"

using loom::comm::Communicator;

namespace {

loom::nn::GPTConfig four_blocks() {
  return {.vocab_size = 32, .context = 8, .layers = 4, .heads = 2, .channels = 32};
}

}  // namespace

TEST_CASE("GPT calls every subscriber's unit hooks around each unit's forward and backward", "[zero][nn]") {
  loom::nn::GPT model(four_blocks(), loom::nn::Precision::fp32(), loom::Device::cpu());
  std::vector<std::string> seen;
  // (not "f" + to_string: GCC 12 warns falsely about that, -Wrestrict)
  auto record = [&](const char* what, std::size_t u) { seen.push_back(std::string(what).append(std::to_string(u))); };
  auto subscriber = [&](const char* tag) {
    const std::string t(tag);
    return loom::model::UnitHooks{[&, t](std::size_t u, loom::StreamRef) { record((t + "F").c_str(), u); },
                                  [&, t](std::size_t u, loom::StreamRef) { record((t + "f").c_str(), u); },
                                  [&, t](std::size_t u, loom::StreamRef) { record((t + "B").c_str(), u); },
                                  [&, t](std::size_t u, loom::StreamRef) { record((t + "b").c_str(), u); }};
  };
  const auto first = model.add_unit_hooks(subscriber("1"));
  model.add_unit_hooks(subscriber("2"));
  loom::test::GlobalBatchSlice data(2, 0, 2);
  const loom::data::Batch batch = data.next();
  model.forward(batch.inputs, batch.targets);
  model.backward();
  // Before-hooks in subscription order, after-hooks in reverse; the root unit (0) brackets both.
  const std::vector<std::string> expected{
      "1F0", "2F0", "1F1", "2F1", "2f1", "1f1", "1F2", "2F2", "2f2", "1f2", "1F3", "2F3", "2f3", "1f3",
      "1F4", "2F4", "2f4", "1f4", "2f0", "1f0",
      "1B0", "2B0", "1B4", "2B4", "2b4", "1b4", "1B3", "2B3", "2b3", "1b3", "1B2", "2B2", "2b2", "1b2",
      "1B1", "2B1", "2b1", "1b1", "2b0", "1b0"};
  CHECK(seen == expected);
  CHECK(model.root_units() == std::vector<std::size_t>{0});
  REQUIRE(model.parameter_space().units().size() == 5);
  CHECK(model.parameter_space().units()[0].name == "embeddings");
  CHECK(model.parameter_space().units()[4].name == "h3");
  // Removing one subscriber leaves the other.
  model.remove_unit_hooks(first);
  seen.clear();
  model.forward(batch.inputs, batch.targets);
  CHECK(seen.size() == 10);
  CHECK(seen.front() == "2F0");
}

TEST_CASE("ZeRO-2 keeps at most three gradient buffers, each its unit's size, and gives the model back", "[zero]") {
  std::vector<std::size_t> buffers(2);
  std::vector<std::int64_t> pool_bytes(2), full_gradient_bytes(2);
  std::vector<int> grads_back(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    loom::nn::GPT model(four_blocks(), loom::nn::Precision::fp32(), loom::Device::cpu());
    loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
    loom::train::TrainerOptions options;
    options.schedule.total = 1;  // max_lr for the first step, min_lr after
    options.zero = 2;
    options.grad_accumulation = 3;
    {
      loom::train::Trainer trainer(model, data, options, &comm);
      for (int step = 0; step < 3; ++step) trainer.step();
      buffers[r] = trainer.zero_engine()->pool_buffers();
      pool_bytes[r] = trainer.zero_engine()->pool_bytes();
    }
    full_gradient_bytes[r] = static_cast<std::int64_t>(model.parameter_space().grads().nbytes());
    grads_back[r] = model.parameter_space().grads_allocated() && model.parameters().front()->has_grad();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << buffers[r] << " buffers, " << pool_bytes[r] << " bytes; all gradients "
                 << full_gradient_bytes[r] << " bytes");
    CHECK(buffers[r] <= 3);
    CHECK(pool_bytes[r] < full_gradient_bytes[r] * 3 / 5);  // the embeddings' unit and two blocks of four
    CHECK(grads_back[r] == 1);
  }
}

TEST_CASE("ZeRO refuses misuse by name", "[zero]") {
  auto comms = loom::comm::make_in_process_communicators(1);
  Communicator& comm = *comms[0];
  loom::nn::GPT model(four_blocks(), loom::nn::Precision::fp32(), loom::Device::cpu());
  CHECK_THROWS_WITH(loom::shard::ZeroEngine(comm, model, 4), Catch::Contains("stage must be 1, 2 or 3, got 4"));
  loom::shard::ZeroOptions keep;
  keep.keep_gathered_for_backward = true;
  CHECK_THROWS_WITH(loom::shard::ZeroEngine(comm, model, 2, {}, keep), Catch::Contains("stage 3 only"));
  loom::shard::ZeroOptions bf16;
  bf16.reduction = loom::DType::bf16;
  CHECK_THROWS_WITH(loom::shard::ZeroEngine(comm, model, 1, {}, bf16), Catch::Contains("needs stage 2 or 3"));
  loom::ddp::ReducerOptions compressed;
  compressed.hook = loom::ddp::compression_hook(loom::DType::bf16);
  CHECK_THROWS_WITH(loom::shard::ZeroEngine(comm, model, 1, compressed), Catch::Contains("compression"));
  {
    loom::shard::ZeroEngine zero2(comm, model, 2);
    CHECK_THROWS_WITH(zero2.no_sync(), Catch::Contains("ZeRO-2 reduces every micro-batch"));
    CHECK_THROWS_WITH(model.parameter_space().repartition(2), Catch::Contains("gradients are released"));
  }
  {
    loom::shard::ZeroEngine zero3(comm, model, 3);
    CHECK_THROWS_WITH(model.parameter_space().repartition(2), Catch::Contains("values are sharded"));
    CHECK_THROWS_WITH(loom::shard::ZeroEngine(comm, model, 3), Catch::Contains("sharded already"));
    CHECK_THROWS_WITH(model.parameter_space().unit_values(1), Catch::Contains("not gathered now"));
    zero3.unshard_values();
  }
  loom::test::GlobalBatchSlice data(2, 0, 2);
  loom::train::TrainerOptions options;
  options.schedule.total = 1;  // max_lr for the first step, min_lr after
  options.zero = 1;
  CHECK_THROWS_WITH(loom::train::Trainer(model, data, options), Catch::Contains("none was given"));
  options.zero = 5;
  CHECK_THROWS_WITH(loom::train::Trainer(model, data, options, &comm), Catch::Contains("zero must be 0, 1, 2 or 3"));
}
