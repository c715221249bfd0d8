// Checkpoints of data-parallel jobs: rank 0 writes, every rank resumes and continues exactly as the
// uninterrupted job would; a job with another number of ranks is refused (each rank's data
// position counts batches of a stream partitioned over the ranks).
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
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

loom::train::TrainerOptions options() {
  loom::train::TrainerOptions o;
  o.grad_accumulation = 2;
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

// One rank of a 2-rank job: `steps` steps from scratch or from `resume_from`; saves after step
// `save_at` (rank 0) into `dir`. Returns the final weights.
std::vector<float> train_rank(Communicator& comm, int steps, int save_at, const std::string& dir, bool resume) {
  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 11);
  loom::ddp::GradientReducer reducer(comm, model.parameters());
  loom::data::AdditionTask data({.digits = 2, .seed = 5}, 3, 24, {.rank = comm.rank(), .world = comm.size()});
  loom::train::Trainer trainer(model, data, options(), &reducer);
  if (resume) trainer.restore(loom::io::load_checkpoint(dir, model, trainer.optimizer()));
  while (trainer.steps_done() < steps) {
    trainer.step();
    if (trainer.steps_done() == save_at && comm.rank() == 0) {
      loom::io::save_checkpoint(dir, model, trainer.optimizer(), trainer.progress());
    }
  }
  comm.barrier().wait();  // the checkpoint is complete before anyone reads it
  return weights(model);
}

}  // namespace

TEST_CASE("a data-parallel job resumes exactly from rank 0's checkpoint, and only with as many ranks", "[ddp][io]") {
  const fs::path dir = fs::temp_directory_path() / ("loom_ddp_checkpoint_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<std::vector<float>> straight(2), resumed(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    straight[static_cast<std::size_t>(comm.rank())] = train_rank(comm, 4, 2, dir.string(), false);
  });
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    resumed[static_cast<std::size_t>(comm.rank())] = train_rank(comm, 4, -1, dir.string(), true);
  });
  CHECK(straight[0] == straight[1]);  // the replicas stay identical
  CHECK(resumed[0] == straight[0]);   // bit for bit: same data positions, optimizer state and reductions
  CHECK(resumed[1] == straight[1]);

  loom::nn::GPT model(tiny(), loom::nn::Precision::fp32(), loom::Device::cpu(), 11);
  loom::data::AdditionTask data({.digits = 2, .seed = 5}, 3, 24);
  loom::train::Trainer alone(model, data, options());
  const loom::io::TrainingProgress progress = loom::io::load_checkpoint(dir.string(), model, alone.optimizer());
  CHECK(progress.data_ranks == 2);
  CHECK_THROWS_MATCHES(alone.restore(progress), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument,
                                           {"written by a job of 2 rank(s)", "this job has 1", "Resume with 2 rank(s)"}));
  fs::remove_all(dir);
}
