// ZeRO-3's own contracts, beyond its equivalence with DDP (ddp/test_ddp_equivalence.cpp): the
// order its gathers are issued in and how many units are gathered at once, prefetching, a model
// whose units leave some ranks only padding (at every stage), forward-only use (evaluation and
// generation), and checkpoints that resume at other stages and rank counts.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "examples/train_mlp/mlp.hpp"
#include "examples/train_mlp/regression_task.hpp"
#include "loom/comm/in_process.hpp"
#include "loom/core/error.hpp"
#include "support/error_message.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/shard/zero.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "loom/core/tensor_ops.hpp"

using loom::Tensor;
using loom::comm::Communicator;

namespace {

loom::nn::GPTConfig four_blocks() { return {.vocab_size = 32, .context = 8, .layers = 4, .heads = 2, .channels = 32}; }

std::set<std::size_t> gathered_units(const loom::model::ParameterSpace& space) {
  std::set<std::size_t> out;
  for (std::size_t u = 0; u < space.units().size(); ++u) {
    if (space.bound_unit_values(u).defined()) out.insert(u);
  }
  return out;
}

std::vector<float> all_values(const loom::model::ParameterSpace& space) {
  std::vector<float> out;
  for (const loom::model::Parameter* p : space.parameters()) {
    const std::vector<double> v = loom::to_doubles(p->value().to(loom::Device::cpu()));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

TEST_CASE("ZeRO-3 gathers each unit before its use, prefetches the next, and keeps at most two besides the root",
          "[zero]") {
  // What a later subscriber sees at each hook: the engine's before-hooks ran first, its
  // after-hooks run next.
  std::vector<std::vector<std::string>> log(2);
  std::vector<loom::shard::GatherReport> reports(2);
  std::vector<std::size_t> most(2);
  std::vector<std::size_t> left_gathered(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    loom::nn::GPT model(four_blocks(), loom::nn::Precision::fp32(), loom::Device::cpu());
    loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
    loom::train::TrainerOptions options;
    options.schedule.total = 1;  // max_lr for the first step, min_lr after
    options.zero = 3;
    loom::train::Trainer trainer(model, data, options, &comm);
    trainer.step();  // the first step, then one observed
    trainer.zero_engine()->reset_gather_report();
    const loom::model::ParameterSpace& space = model.parameter_space();
    auto note = [&](const char* what, std::size_t u) {
      const std::set<std::size_t> now = gathered_units(space);
      most[r] = std::max(most[r], now.size());
      std::string line = std::string(what).append(std::to_string(u)).append(":");
      for (const std::size_t g : now) line.append(" ").append(std::to_string(g));
      log[r].push_back(line);
    };
    model.add_unit_hooks({[&](std::size_t u, loom::StreamRef) { note("F", u); }, {},
                          [&](std::size_t u, loom::StreamRef) { note("B", u); }, {}});
    trainer.step();
    reports[r] = trainer.zero_engine()->gather_report();
    left_gathered[r] = gathered_units(space).size();  // Catch's assertions are not thread-safe
  });
  // Forward: unit u and the next one (in flight) besides the root; the last unit stays for the
  // backward, which starts with it and prefetches the one before.
  const std::vector<std::string> expected{"F0: 0 1", "F1: 0 1 2", "F2: 0 2 3", "F3: 0 3 4", "F4: 0 4",
                                          "B0: 0 4", "B4: 0 3 4", "B3: 0 2 3", "B2: 0 1 2", "B1: 0 1"};
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(left_gathered[r] == 0);  // after the update nothing stays gathered
    CHECK(log[r] == expected);
    CHECK(most[r] <= 3);
    CHECK(reports[r].peak_live <= 3);
    // 5 in forward (the root on demand, 4 prefetched), 3 prefetched in backward (h3 stayed).
    CHECK(reports[r].gathers == 8);
    CHECK(reports[r].prefetched == 7);
    CHECK(reports[r].buffers <= 3);
  }
}

TEST_CASE("Units smaller than 64 x N elements (some ranks own only padding) train at every stage like DDP", "[zero]") {
  // Layers of 8 x 8 weights and 8 biases: a unit of 128 elements, padded to 192 at 3 ranks and 256
  // at 4, so the last rank(s) of every unit own nothing but padding.
  const train_mlp::MlpConfig config{.inputs = 8, .hidden = 8, .layers = 3, .outputs = 8};
  for (int ranks : {3, 4}) {
    for (int stage : {1, 2, 3}) {
      INFO(ranks << " ranks, ZeRO-" << stage);
      std::vector<std::vector<float>> ddp(static_cast<std::size_t>(ranks)), zero(ddp.size());
      std::vector<float> ddp_loss(ddp.size()), zero_loss(ddp.size());
      std::vector<std::string> errors(ddp.size());
      loom::comm::run_in_process(ranks, [&](Communicator& comm) {
        const auto r = static_cast<std::size_t>(comm.rank());
        try {
          auto train = [&](int zero_stage, std::vector<float>& weights, float& loss) {
            train_mlp::Mlp model(config, loom::model::Precision::fp32(), loom::Device::cpu(), 5);
            train_mlp::RegressionTask data({.inputs = 8, .outputs = 8}, 4, {comm.rank(), comm.size()});
            loom::train::TrainerOptions options;
            options.zero = zero_stage;
            options.grad_accumulation = 2;
            options.schedule = {.max_lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 4};
            loom::train::Trainer trainer(model, data, options, &comm);
            for (int s = 0; s < 4; ++s) loss = trainer.step().loss;
            if (zero_stage == 3) trainer.zero_engine()->unshard_values();
            weights = all_values(model.parameter_space());
          };
          train(0, ddp[r], ddp_loss[r]);
          train(stage, zero[r], zero_loss[r]);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
      for (std::size_t r = 0; r < ddp.size(); ++r) {
        INFO("rank " << r << ": " << errors[r]);
        REQUIRE(errors[r].empty());
        REQUIRE(zero[r].size() == ddp[r].size());
        double diff = 0;
        for (std::size_t i = 0; i < ddp[r].size(); ++i) diff = std::max(diff, std::fabs(double(zero[r][i]) - ddp[r][i]));
        INFO("max |ZeRO - DDP| " << diff << ", losses " << zero_loss[r] << " and " << ddp_loss[r]);
        CHECK(diff <= 2e-6);
        CHECK(std::fabs(zero_loss[r] - ddp_loss[r]) <= 1e-6);
      }
    }
  }
}

TEST_CASE("Evaluation and generation under ZeRO-3 give DDP's results (every rank runs them)", "[zero]") {
  std::vector<float> ddp_loss(2), zero_loss(2);
  std::vector<std::vector<std::vector<std::int32_t>>> ddp_text(2), zero_text(2);
  std::vector<std::size_t> left_gathered(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    for (int stage : {0, 3}) {
      loom::nn::GPT model(four_blocks(), loom::nn::Precision::fp32(), loom::Device::cpu());
      loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
      loom::train::TrainerOptions options;
      options.schedule.total = 1;  // max_lr for the first step, min_lr after
      options.zero = stage;
      loom::train::Trainer trainer(model, data, options, &comm);
      for (int s = 0; s < 2; ++s) trainer.step();
      loom::test::GlobalBatchSlice held_out(2, 0, 2);
      held_out.seek(50);
      const loom::data::Batch batch = held_out.next();
      const float loss = model.forward(batch.inputs, batch.targets);
      const auto text = loom::nn::generate(model, {{1, 2, 3}, {4, 5, 6}}, {.max_new_tokens = 6});
      (stage == 0 ? ddp_loss : zero_loss)[r] = loss;
      (stage == 0 ? ddp_text : zero_text)[r] = text;
      if (stage == 3) {
        left_gathered[r] = gathered_units(model.parameter_space()).size();
        trainer.step();  // training continues after forward-only use
      }
    }
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(zero_loss[r] == ddp_loss[r]);
    CHECK(zero_text[r] == ddp_text[r]);
    CHECK(left_gathered[r] <= 2);  // the root and the last unit
  }
}

TEST_CASE("A ZeRO-3 checkpoint resumes at one rank without ZeRO and at two ranks with ZeRO-2", "[zero][io]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "loom_zero3_checkpoint";
  std::filesystem::remove_all(dir);
  std::vector<float> saved_values;
  std::vector<std::string> errors(3);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    try {
      loom::nn::GPT model(four_blocks(), loom::nn::Precision::bf16(), loom::Device::cpu());
      loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
      loom::train::TrainerOptions options;
      options.schedule.total = 1;  // max_lr for the first step, min_lr after
      options.zero = 3;
      loom::train::Trainer trainer(model, data, options, &comm);
      for (int s = 0; s < 2; ++s) trainer.step();
      trainer.save(dir.string());
      trainer.zero_engine()->unshard_values();
      if (comm.rank() == 0) saved_values = all_values(model.parameter_space());
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  REQUIRE(errors[0].empty());
  REQUIRE(errors[1].empty());
  loom::test::GlobalBatchSlice held_out(2, 0, 2);
  held_out.seek(77);
  const loom::data::Batch probe = held_out.next();
  float resumed_loss = 0;
  // One process, no ZeRO: the same values, and it trains on.
  {
    loom::nn::GPT model(four_blocks(), loom::nn::Precision::bf16(), loom::Device::cpu(), 99);
    loom::test::GlobalBatchSlice data(4, 0, 4);
    loom::train::Trainer trainer(model, data, {.schedule = {.total = 4}});
    REQUIRE(trainer.resume(dir.string()));
    CHECK(trainer.steps_done() == 2);
    CHECK(all_values(model.parameter_space()) == saved_values);
    resumed_loss = model.forward(probe.inputs, probe.targets);
    CHECK(std::isfinite(trainer.step().loss));
  }
  // Two ranks, ZeRO-2; and back into ZeRO-3.
  for (int stage : {2, 3}) {
    std::vector<std::vector<float>> values(2);
    std::vector<float> losses(2);
    loom::comm::run_in_process(2, [&](Communicator& comm) {
      try {
        loom::nn::GPT model(four_blocks(), loom::nn::Precision::bf16(), loom::Device::cpu(), 99);
        loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
        loom::train::TrainerOptions options;
        options.schedule.total = 1;  // max_lr for the first step, min_lr after
        options.zero = stage;
        loom::train::Trainer trainer(model, data, options, &comm);
        // A forward before the resume leaves units gathered with the old values; the one after it
        // must see the checkpoint's.
        model.forward(probe.inputs, probe.targets);
        trainer.resume(dir.string());
        losses[static_cast<std::size_t>(comm.rank())] = model.forward(probe.inputs, probe.targets);
        if (stage == 3) trainer.zero_engine()->unshard_values();
        values[static_cast<std::size_t>(comm.rank())] = all_values(model.parameter_space());
        trainer.step();
      } catch (const std::exception& e) {
        errors[2] = e.what();
      }
    });
    INFO("ZeRO-" << stage << ": " << errors[2]);
    REQUIRE(errors[2].empty());
    CHECK(values[0] == saved_values);
    CHECK(values[1] == saved_values);
    CHECK(losses[0] == resumed_loss);
    CHECK(losses[1] == resumed_loss);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("A model built in its stage's layout holds only the stage's share, and a use that does not fit is named",
          "[zero]") {
  const loom::nn::Precision fp32 = loom::nn::Precision::fp32();
  // What each rank saw (Catch's assertions are not thread-safe: checked after the ranks end).
  struct Seen {
    bool zero2_layout = false, zero3_layout = false, engine_kept_shard = false;
    std::string forward, reducer, zero2, second_engine, mixed_seeds, next_engine;
  };
  std::vector<Seen> seen(2);
  using loom::test::error_message;
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    Seen& s = seen[static_cast<std::size_t>(comm.rank())];
    loom::nn::GPT zero2(four_blocks(), fp32, loom::Device::cpu(), 1, loom::shard::space_layout(2, &comm));
    s.zero2_layout = zero2.parameter_space().ranks() == 2 && zero2.parameter_space().values().defined() &&
                     !zero2.parameter_space().grads_allocated();
    loom::nn::GPT zero3(four_blocks(), fp32, loom::Device::cpu(), 1, loom::shard::space_layout(3, &comm));
    const loom::model::ParameterSpace& space = zero3.parameter_space();
    s.zero3_layout = space.value_mode() == loom::model::ValueMode::sharded && space.value_rank() == comm.rank() &&
                     space.local_values().numel() == space.elements() / 2 && !space.grads_allocated();
    // Outside an engine, its units have no values.
    const Tensor tokens = Tensor::zeros({1, 4}, loom::DType::i32);
    s.forward = error_message([&] { zero3.forward(tokens, tokens); });
    // DDP and ZeRO-1/2 keep every value on every rank: they refuse it by name (collectively).
    s.reducer = error_message([&] { loom::ddp::GradientReducer reducer(comm, zero3.parameter_space()); });
    s.zero2 = error_message([&] { loom::shard::ZeroEngine engine(comm, zero3, 2); });
    // Its engine takes it as it is (no copy of the full values); a second engine is refused.
    {
      const void* shard = space.local_values().raw_data();
      loom::shard::ZeroEngine engine(comm, zero3, 3);
      s.engine_kept_shard = space.local_values().raw_data() == shard && space.value_mode() == loom::model::ValueMode::sharded;
      s.second_engine = error_message([&] { loom::shard::ZeroEngine second(comm, zero3, 3); });
    }
    // Slices made from different seeds are not one model.
    loom::nn::GPT mixed(four_blocks(), fp32, loom::Device::cpu(), 1 + static_cast<std::uint64_t>(comm.rank()),
                        loom::shard::space_layout(3, &comm));
    s.mixed_seeds = error_message([&] { loom::shard::ZeroEngine engine(comm, mixed, 3); });
    // A model built whole (another seed on each rank), made one by the first engine's broadcast and
    // left sharded by it, is taken by the next engine.
    loom::nn::GPT whole(four_blocks(), fp32, loom::Device::cpu(), 5 + static_cast<std::uint64_t>(comm.rank()));
    { loom::shard::ZeroEngine first(comm, whole, 3); }
    s.next_engine = error_message([&] { loom::shard::ZeroEngine next(comm, whole, 3); });
  });
  for (const Seen& s : seen) {
    CHECK(s.zero2_layout);
    CHECK(s.zero3_layout);
    CHECK(s.engine_kept_shard);
    CHECK_THAT(s.forward, Catch::Contains("'wte' has no storage"));
    CHECK_THAT(s.reducer, Catch::Contains("sharded (ZeRO-3's layout)"));
    CHECK_THAT(s.zero2, Catch::Contains("shard::space_layout(2, communicator)"));
    CHECK_THAT(s.second_engine, Catch::Contains("sharded already"));
    CHECK_THAT(s.mixed_seeds, Catch::Contains("initialised from seed 1 on rank 0 and initialised from seed 2 on rank 1") &&
                                  Catch::Contains("every rank must build the model with the same seed"));
    CHECK(s.next_engine == "no error");
  }
  auto one = loom::comm::make_in_process_communicators(1);
  loom::nn::GPT rank1_of_2(four_blocks(), fp32, loom::Device::cpu(), 1,
                           {.ranks = 2, .rank = 1, .values = loom::model::ValueMode::sharded});
  CHECK_THROWS_WITH(loom::shard::ZeroEngine(*one[0], rank1_of_2, 3), Catch::Contains("sharded as rank 1 of 2, but this "
                                                                                    "rank is rank 0 of 1"));
  loom::nn::GPT zero2_of_2(four_blocks(), fp32, loom::Device::cpu(), 1, {.ranks = 2, .rank = 1, .grads = false});
  CHECK_THROWS_WITH(loom::shard::ZeroEngine(*one[0], zero2_of_2, 2),
                    Catch::Contains("built for 2 ranks without a gradient buffer") &&
                        Catch::Contains("the communicator has 1 ranks"));
  loom::test::GlobalBatchSlice data(2, 0, 2);
  CHECK_THROWS_WITH(loom::train::Trainer(rank1_of_2, data, {.schedule = {.total = 1}}),
                    Catch::Contains("no communicator was given"));
  CHECK_THROWS_WITH(loom::shard::space_layout(3, nullptr), Catch::Contains("none was given"));
}
