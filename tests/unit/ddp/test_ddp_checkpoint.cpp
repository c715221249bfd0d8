// Checkpoints of data-parallel jobs: rank 0 writes, every rank resumes and continues exactly as the
// uninterrupted job would; a checkpoint written at 4 ranks with ZeRO-2 resumes at 2 ranks with
// ZeRO-1 and at 1 rank with DDP (same global batch) and the losses continue; a job whose ranks do
// not divide the consumed batches is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "loom/comm/in_process.hpp"
#include "loom/data/addition_task.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/train/trainer.hpp"
#include "support/tensor_checks.hpp"
#include "support/tiny_gpt.hpp"

namespace fs = std::filesystem;
using loom::comm::Communicator;

namespace {

loom::nn::GPTConfig tiny() { return loom::test::tiny_gpt(256, 24); }

loom::train::TrainerOptions options(int zero = 0, std::int64_t accumulation = 2) {
  loom::train::TrainerOptions o;
  o.grad_accumulation = accumulation;
  o.zero = zero;
  o.schedule = {.max_lr = 3e-3f, .min_lr = 3e-4f, .warmup = 1, .total = 4};
  o.data_seed = 5;
  return o;
}

std::vector<float> weights(const loom::nn::GPT& model) {
  std::vector<float> all;
  for (const loom::nn::Parameter* p : model.parameters()) {
    const auto v = p->value().to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

struct RankRun {
  std::vector<float> weights;
  std::vector<float> losses;  // of the steps this run took
};

// One rank of a job: `steps` steps from scratch or resumed from `dir`; saves after step `save_at`
// (every rank takes part, rank 0 writes) into `dir`.
RankRun train_rank(Communicator& comm, int steps, int save_at, const std::string& dir, bool resume,
                   const loom::train::TrainerOptions& o = options()) {
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 11);
  loom::data::AdditionTask data({.digits = 2, .seed = 5}, 3, 24, {.rank = comm.rank(), .world = comm.size()});
  loom::train::Trainer trainer(model, data, o, comm.size() > 1 || o.zero > 0 ? &comm : nullptr);
  if (resume && !trainer.resume(dir)) throw std::runtime_error("no checkpoint in " + dir);  // (no Catch2 in threads)
  RankRun run;
  while (trainer.steps_done() < steps) {
    run.losses.push_back(trainer.step().loss);
    if (trainer.steps_done() == save_at) trainer.save(dir);
  }
  comm.barrier().wait();  // the checkpoint is complete before anyone reads it
  run.weights = weights(model);
  return run;
}

}  // namespace

TEST_CASE("a data-parallel job resumes exactly from its checkpoint", "[ddp][io]") {
  const fs::path dir = fs::temp_directory_path() / ("loom_ddp_checkpoint_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<RankRun> straight(2), resumed(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    straight[static_cast<std::size_t>(comm.rank())] = train_rank(comm, 4, 2, dir.string(), false);
  });
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    resumed[static_cast<std::size_t>(comm.rank())] = train_rank(comm, 4, -1, dir.string(), true);
  });
  CHECK(straight[0].weights == straight[1].weights);  // the replicas stay identical
  CHECK(resumed[0].weights == straight[0].weights);   // bit for bit: same data, optimizer state and reductions
  CHECK(resumed[1].weights == straight[1].weights);

  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 11);
  loom::data::AdditionTask data({.digits = 2, .seed = 5}, 3, 24);
  loom::train::Trainer alone(model, data, options());
  const loom::io::TrainingProgress progress = loom::io::load_checkpoint(dir.string(), model, alone.optimizer());
  CHECK(progress.batches_consumed == 8);  // 2 steps x 2 ranks x 2 micro-batches
  fs::remove_all(dir);
}

TEST_CASE("a ZeRO-2 checkpoint of 4 ranks resumes at 2 ranks with ZeRO-1 and at 1 rank with DDP", "[ddp][io][zero]") {
  const fs::path dir = fs::temp_directory_path() / ("loom_zero_checkpoint_" + std::to_string(getpid()));
  fs::remove_all(dir);
  // The global batch stays 4 micro-batches of 3 sequences: ranks x accumulation = 4.
  std::vector<RankRun> straight(4);
  loom::comm::run_in_process(4, [&](Communicator& comm) {
    straight[static_cast<std::size_t>(comm.rank())] = train_rank(comm, 5, 2, dir.string(), false, options(2, 1));
  });
  const std::vector<float>& reference = straight[0].losses;  // the job's losses, the same on every rank
  REQUIRE(reference.size() == 5);
  CHECK(straight[3].weights == straight[0].weights);

  auto continues = [&](const std::vector<float>& losses) {
    REQUIRE(losses.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) CHECK(std::fabs(losses[i] - reference[2 + i]) <= 1e-5);
  };
  std::vector<RankRun> two(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    two[static_cast<std::size_t>(comm.rank())] = train_rank(comm, 5, -1, dir.string(), true, options(1, 2));
  });
  continues(two[0].losses);
  std::vector<RankRun> one(1);
  loom::comm::run_in_process(1, [&](Communicator& comm) {
    one[0] = train_rank(comm, 5, -1, dir.string(), true, options(0, 4));
  });
  continues(one[0].losses);
  double worst = 0;
  for (std::size_t i = 0; i < one[0].weights.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(one[0].weights[i] - straight[0].weights[i])));
  }
  CHECK(worst <= 1e-5);

  // 8 batches consumed do not divide over 3 ranks: refused on every rank, naming the numbers.
  std::vector<std::string> errors(3);
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    errors[static_cast<std::size_t>(comm.rank())] =
        loom::test::error_of([&] { train_rank(comm, 5, -1, dir.string(), true, options(1, 1)); });
  });
  for (const std::string& error : errors) CHECK_THAT(error, Catch::Contains("consumed 8 batches"));
  fs::remove_all(dir);
}
