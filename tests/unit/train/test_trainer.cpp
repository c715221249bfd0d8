// Trainer with in-process ranks: the failure path (one rank's forward throws on a bad batch, and every
// rank's step fails at once with that rank's error instead of waiting out a 300 s timeout), and the
// parallel groups it takes (what fits together, and the named errors for what does not).
#include <catch2/catch.hpp>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/error_message.hpp"

TEST_CASE("one rank failing in forward fails every rank's step at once, naming it and its error", "[train]") {
  for (int stage : {0, 2, 3}) {
    INFO("ZeRO stage " << stage);
    loom::comm::CommOptions options;
    options.timeout = std::chrono::milliseconds(300000);
    std::vector<std::string> errors(3);
    std::vector<int> failed_at(3, 0);
    const auto start = std::chrono::steady_clock::now();
    loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      loom::nn::GPT model({.vocab_size = 32, .context = 8, .layers = 2, .heads = 2, .channels = 16},
                          loom::nn::Precision::fp32(), loom::Device::cpu());
      loom::test::BadBatchAt data(loom::test::GlobalBatchSlice(6, 2 * comm.rank(), 2), comm.rank() == 2 ? 2 : -1);
      loom::train::TrainerOptions trainer_options;
      trainer_options.schedule.total = 1;  // max_lr for the first step, min_lr after
      trainer_options.zero = stage;
      loom::train::Trainer trainer(model, data, trainer_options, &comm);
      for (int step = 1; step <= 5 && errors[r].empty(); ++step) {
        try {
          trainer.step();
        } catch (const std::exception& e) {
          errors[r] = e.what();
          failed_at[r] = step;
        }
      }
    }, options);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank " << r << ": " << errors[r]);
      CHECK(failed_at[r] == 3);
      CHECK_THAT(errors[r], Catch::Contains("token 99 at position (0, 1)"));
      if (r < 2) CHECK_THAT(errors[r], Catch::Contains("rank 2: failed in forward or backward of step 3"));
    }
  }
}

TEST_CASE("Trainer takes the job's parallel groups and names groups that do not fit together", "[train]") {
  std::vector<std::string> errors(4 * 2);
  std::vector<float> losses(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& world) {
    const auto r = static_cast<std::size_t>(world.rank());
    loom::nn::GPT model({.vocab_size = 32, .context = 8, .layers = 1, .heads = 2, .channels = 16},
                        loom::nn::Precision::fp32(), loom::Device::cpu());
    loom::test::GlobalBatchSlice data(4, 2 * world.rank(), 2);
    const std::unique_ptr<loom::comm::Communicator> alone = world.split(world.rank(), 0);
    const std::unique_ptr<loom::comm::Communicator> reversed = world.split(0, -world.rank());
    const std::unique_ptr<loom::comm::Communicator> pair = world.split(0, world.rank());
    loom::train::TrainerOptions options;
    options.schedule.total = 1;
    auto error_of = [&](loom::train::ParallelGroups groups) {
      try {
        loom::train::Trainer trainer(model, data, options, groups);
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    errors[r * 4 + 0] = error_of({&world, pair.get(), alone.get()});     // fits: data = world, tensor of 1
    errors[r * 4 + 1] = error_of({&world, alone.get(), nullptr});        // 1 x 1 is not 2
    errors[r * 4 + 2] = error_of({&world, &world, pair.get()});          // 2 x 2 is not 2
    errors[r * 4 + 3] = error_of({&world, reversed.get(), nullptr});     // the ranks in another order
    loom::train::Trainer trainer(model, data, options, {&world, pair.get(), alone.get()});
    losses[r] = trainer.step().loss;
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r * 4 + 0].empty());
    CHECK_THAT(errors[r * 4 + 1], Catch::Contains("times the tensor-parallel group (1) must be the world (2 ranks)"));
    CHECK_THAT(errors[r * 4 + 2], Catch::Contains("times the tensor-parallel group (2) must be the world (2 ranks)"));
    CHECK_THAT(errors[r * 4 + 3], Catch::Contains("do not place the ranks as a data x tensor mesh does"));
  }
  CHECK(losses[0] == losses[1]);  // the step's loss is the data group's mean
}

TEST_CASE("a Trainer refuses a learning-rate schedule without its length, naming it", "[train]") {
  loom::nn::GPT model({.vocab_size = 32, .context = 8, .layers = 1, .heads = 2, .channels = 16},
                      loom::nn::Precision::fp32(), loom::Device::cpu());
  loom::test::GlobalBatchSlice data(2, 0, 2);
  CHECK_THROWS_WITH(loom::train::Trainer(model, data, {}), Catch::Contains("cosine schedule: no length (total = 0)"));
  loom::train::TrainerOptions options;
  options.schedule.total = 10;
  loom::train::Trainer trainer(model, data, options);
  CHECK(trainer.step().lr == Approx(3e-4f));  // the default max_lr at step 1 (no warmup)
}

TEST_CASE("describe(TrainerOptions) names every setting, defaults included", "[train]") {
  loom::train::TrainerOptions options;
  options.schedule.total = 1000;
  CHECK(loom::train::describe(options) ==
        "AdamW (beta1 0.9, beta2 0.95, eps 1e-08, weight decay 0.1), lr 0.0003 -> 3e-05 cosine by step 1000 after 0 "
        "warmup steps, clipping at global norm 1, 1 micro-batch(es) per step, ZeRO stage 0, stragglers compared every 50 "
        "steps (margin 20%)");
  options.optimizer = loom::train::TrainerOptions::OptimizerKind::sgd;
  options.max_grad_norm = 0;
  options.grad_accumulation = 4;
  options.zero = 2;
  options.stragglers.every = 0;
  CHECK(loom::train::describe(options) ==
        "SGD (momentum 0.9, dampening 0, weight decay 0), lr 0.0003 -> 3e-05 cosine by step 1000 after 0 warmup steps, "
        "no clipping, 4 micro-batch(es) per step, ZeRO stage 2, no straggler check");
}

TEST_CASE("a Trainer refuses a model whose values were never set, on every rank, naming the fix", "[train]") {
  loom::train::TrainerOptions options;
  options.schedule.total = 10;
  {
    loom::nn::GPT model({.vocab_size = 32, .context = 8, .layers = 1, .heads = 2, .channels = 16},
                        loom::nn::Precision::fp32(), loom::Device::cpu());
    model.parameter_space().set_value_origin("");  // as a space nobody initialised
    loom::test::GlobalBatchSlice data(2, 0, 2);
    CHECK_THROWS_WITH(loom::train::Trainer(model, data, options),
                      Catch::Contains("parameter values were never set") && Catch::Contains("initialize(seed)"));
  }
  // Data-parallel: rank 0's values are the ones broadcast, so rank 0 unset fails both ranks, and a
  // rank other than 0 unset is fine (it receives rank 0's).
  std::vector<std::string> errors(4);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    for (int unset_rank = 0; unset_rank < 2; ++unset_rank) {
      loom::nn::GPT model({.vocab_size = 32, .context = 8, .layers = 1, .heads = 2, .channels = 16},
                          loom::nn::Precision::fp32(), loom::Device::cpu());
      if (comm.rank() == unset_rank) model.parameter_space().set_value_origin("");
      loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
      errors[static_cast<std::size_t>(unset_rank * 2 + comm.rank())] =
          loom::test::error_message([&] { loom::train::Trainer trainer(model, data, options, &comm); });
    }
  });
  CHECK_THAT(errors[0], Catch::Contains("never set (on rank 0"));
  CHECK_THAT(errors[1], Catch::Contains("never set (on rank 0"));
  CHECK(errors[2] == "no error");
  CHECK(errors[3] == "no error");
}

namespace {
// GlobalBatchSlice whose every batch takes `delay` to arrive: a slow data pipeline.
class SlowBatches : public loom::test::GlobalBatchSlice {
 public:
  SlowBatches(std::int64_t total, std::int64_t begin, std::int64_t rows, std::chrono::milliseconds delay)
      : GlobalBatchSlice(total, begin, rows), delay_(delay) {}
  loom::data::Batch next() override {
    std::this_thread::sleep_for(delay_);
    return GlobalBatchSlice::next();
  }

 private:
  std::chrono::milliseconds delay_;
};
}  // namespace

TEST_CASE("every rank's step reports its phases: the data wait, compute, communication, optimizer, saves",
          "[train][telemetry]") {
  using loom::telemetry::Phase;
  const auto dir = std::filesystem::temp_directory_path() / "loom_test_trainer_phases";
  std::filesystem::remove_all(dir);
  std::vector<loom::train::StepResult> second(2), third(2);
  std::vector<double> save_seconds(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    loom::nn::GPT model({.vocab_size = 32, .context = 16, .layers = 2, .heads = 2, .channels = 64},
                        loom::nn::Precision::fp32(), loom::Device::cpu());
    SlowBatches data(8, 4 * comm.rank(), 2, std::chrono::milliseconds(15));
    loom::train::TrainerOptions options;
    options.grad_accumulation = 2;
    options.schedule.total = 10;
    loom::train::Trainer trainer(model, data, options, &comm);
    trainer.step();
    second[r] = trainer.step();
    const auto start = std::chrono::steady_clock::now();
    trainer.save(dir.string());
    save_seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    third[r] = trainer.step();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const loom::telemetry::PhaseSeconds& p = second[r].phases;
    CHECK(p[Phase::data] >= 2 * 0.015);  // two micro-batches, each waited for
    CHECK(p[Phase::forward] > 0);
    CHECK(p[Phase::backward] > 0);
    CHECK(p[Phase::communication] > 0);  // the reductions' wait and the loss's mean
    CHECK(p[Phase::optimizer] > 0);
    CHECK(p[Phase::checkpoint] == 0);
    // The phases are disjoint parts of the step: together no more than it, and most of it.
    CHECK(p.total() <= second[r].seconds);
    CHECK(p.total() >= 0.7 * second[r].seconds);
    // A save between steps is the next step's checkpoint phase: its blocking time, measured inside.
    CHECK(third[r].phases[Phase::checkpoint] > 0);
    CHECK(third[r].phases[Phase::checkpoint] <= save_seconds[r]);
    CHECK(third[r].phases[Phase::checkpoint] >= 0.9 * save_seconds[r]);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a rank slowed in backward is named with that phase within one window, and an even run names none",
          "[train][telemetry]") {
  using loom::telemetry::Phase;
  for (const bool slowed : {true, false}) {
    INFO((slowed ? "rank 2 slowed" : "no rank slowed"));
    std::vector<std::vector<loom::telemetry::StragglerWindow>> windows(3);
    loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      omp_set_num_threads(1);  // a thread per rank: the ranks share the cores as evenly as they can
      // Phases of a few milliseconds, so that one preemption in a window of 10 steps moves their
      // average by far less than the margin.
      loom::nn::GPT model({.vocab_size = 32, .context = 32, .layers = 2, .heads = 2, .channels = 128},
                          loom::nn::Precision::fp32(), loom::Device::cpu());
      // The test's delay: 10 ms after each unit's backward on rank 2, through the model's unit hooks.
      loom::model::UnitHooks delay;
      delay.after_backward = [](std::size_t, loom::StreamRef) { std::this_thread::sleep_for(std::chrono::milliseconds(10)); };
      if (slowed && r == 2) model.add_unit_hooks(delay);
      loom::test::GlobalBatchSlice data(6, 2 * comm.rank(), 2);
      loom::train::TrainerOptions options;
      options.schedule.total = 20;
      options.stragglers.every = 10;
      // 3 ranks share this machine's 2 cores, so an even run's short phases differ by up to 2x
      // from scheduling alone; the delay makes rank 2's backward several times the others' and
      // most of the step. A margin of 150% and a share of 20% of the step tell the two apart here
      // (on a rank per core the defaults, 20% and 5%, do).
      options.stragglers.margin = 1.5;
      options.stragglers.min_share = 0.2;
      loom::train::Trainer trainer(model, data, options, &comm);
      for (int step = 1; step <= 20; ++step) {
        const loom::train::StepResult result = trainer.step();
        if (result.stragglers) windows[r].push_back(*result.stragglers);
      }
    });
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank " << r);
      REQUIRE(windows[r].size() == 2);
      for (const auto& w : windows[r]) {
        INFO("window ending at step " << w.last_step);
        if (slowed) {
          REQUIRE(w.findings.size() == 1);
          CHECK(w.findings[0].rank == 2);
          CHECK(w.findings[0].phase == Phase::backward);
          CHECK(w.findings[0].excess() > 1.5);
        } else {
          for (const auto& f : w.findings) FAIL_CHECK("false alarm: " << loom::telemetry::describe(f));
        }
      }
    }
  }
}
