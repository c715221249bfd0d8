// train_mlp: trains a regression MLP with loom's Trainer, one process or data-parallel under
// mpirun (DDP, ZeRO-1 or ZeRO-2), with the same checkpoints as train_gpt. A second model behind
// the model::Model interface, to show the runtime serves any model. It learns a fixed random
// teacher (regression_task.hpp) and reports the held-out mean squared error and its fraction of
// the targets' variance (1 - R^2).
//   build/examples/train_mlp/train_mlp --steps 300
//   mpirun -np 2 build/examples/train_mlp/train_mlp --zero 3 --checkpoint-dir /tmp/mlp
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "loom/core/error.hpp"
#include "loom/loom.hpp"
#include "loom/train/trainer.hpp"
#include "mlp.hpp"
#include "regression_task.hpp"

namespace {

struct Options {
  train_mlp::MlpConfig model{};
  std::int64_t features = 32;
  std::string precision = "fp32";
  std::string device = "cpu";
  std::int64_t batch = 64;
  std::int64_t grad_accumulation = 1;
  std::int64_t steps = 300;
  float lr = 3e-3f;
  std::string optimizer = "adamw";
  int zero = 0;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  bool resume = false;
  std::int64_t log_every = 25;
};

// Held-out batches (no training rank reaches them): the mean squared error and the targets' variance.
std::pair<double, double> evaluate(train_mlp::Mlp& model, const train_mlp::RegressionTask& task) {
  double error = 0, squares = 0, sum = 0, count = 0;
  for (std::int64_t b = 0; b < 4; ++b) {
    const loom::data::Batch batch = task.global_batch((std::int64_t{1} << 40) + b);
    error += model.forward(batch.inputs, batch.targets);
    for (const float t : batch.targets.to_vector<float>()) {
      squares += static_cast<double>(t) * t;
      sum += t;
      ++count;
    }
  }
  const double mean = sum / count;
  return {error / 4, squares / count - mean * mean};
}

int run(const Options& o, loom::World& world) {
  const bool leader = world.rank() == 0;
  const loom::Device device = world.size() == 1 ? loom::Device::parse(o.device) : world.device();
  loom::require(o.zero == 0 || world.size() > 1, "--zero ", o.zero, " shards over the ranks of a data-parallel job; "
                "launch it with mpirun -np N");
  loom::comm::Communicator* comm = world.size() > 1 ? &world.comm() : nullptr;
  train_mlp::Mlp model(o.model, loom::model::Precision::parse(o.precision), device, o.seed,
                       loom::shard::space_layout(o.zero, comm));
  const train_mlp::RegressionTaskConfig task_config{o.model.inputs, o.model.outputs, o.features, o.seed};
  train_mlp::RegressionTask data(task_config, o.batch, {.rank = world.rank(), .world = world.size()});
  loom::train::TrainerOptions options;
  options.grad_accumulation = o.grad_accumulation;
  options.schedule = {.max_lr = o.lr, .min_lr = o.lr * 0.1f, .warmup = std::min<std::int64_t>(20, o.steps), .total = o.steps};
  options.optimizer = o.optimizer == "sgd" ? loom::train::TrainerOptions::OptimizerKind::sgd
                                           : loom::train::TrainerOptions::OptimizerKind::adamw;
  options.adamw.weight_decay = 0.0f;
  options.data_seed = o.seed;
  options.zero = o.zero;
  loom::train::Trainer trainer(model, data, options, comm);
  const auto held = trainer.held_model_state();
  if (leader) {
    std::printf("mlp: %lld inputs, %lld layers of %lld, %lld outputs (%lld parameters), %s on %s; %d rank(s), %s, "
                "model state %.1f KiB per rank (predicted %.1f KiB), unit buffers during backward %.1f KiB (predicted)\n",
                static_cast<long long>(o.model.inputs), static_cast<long long>(o.model.layers),
                static_cast<long long>(o.model.hidden), static_cast<long long>(o.model.outputs),
                static_cast<long long>(model.parameter_space().parameter_elements()), o.precision.c_str(),
                device.to_string().c_str(), world.size(), o.zero == 0 ? "DDP" : ("ZeRO-" + std::to_string(o.zero)).c_str(),
                static_cast<double>(held.persistent()) / 1024,
                static_cast<double>(trainer.predicted_model_state().persistent()) / 1024,
                static_cast<double>(trainer.predicted_model_state().buffers) / 1024);
    std::printf("training: %s\n", loom::train::describe(options).c_str());
  }
  loom::require(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  if (!o.checkpoint_dir.empty()) {  // a checkpoint directory is always resumed from (as train_gpt's --resume auto)
    const loom::train::Trainer::ResumeOutcome outcome = trainer.resume(o.checkpoint_dir);
    for (const std::string& skipped : outcome.skipped) {
      if (leader) std::printf("passed over: %s\n", skipped.c_str());
    }
    if (leader) {
      std::printf(outcome ? "resumed at step %lld\n" : "no checkpoint yet: from scratch (step %lld)\n",
                  static_cast<long long>(trainer.steps_done()));
    }
    loom::require(trainer.steps_done() < o.steps, "--steps ", o.steps, " is not beyond step ", trainer.steps_done(),
                  " of the checkpoint '", outcome.checkpoint, "': nothing to train");
  }
  std::int64_t saved = trainer.steps_done();
  auto save = [&] {
    if (o.checkpoint_dir.empty() || trainer.steps_done() == saved) return;
    const std::string where = trainer.save(o.checkpoint_dir).where;
    saved = trainer.steps_done();
    if (leader) std::printf("saved checkpoint %s\n", where.c_str());
  };
  while (trainer.steps_done() < o.steps) {
    const loom::train::StepResult r = trainer.step();
    if (leader && (r.step % o.log_every == 0 || r.step == o.steps)) {
      std::printf("step %5lld/%lld | loss %.5f | lr %.2e | norm %.4f | %6.2f ms\n", static_cast<long long>(r.step),
                  static_cast<long long>(o.steps), r.loss, r.lr, r.grad_norm, r.seconds * 1e3);
    }
    if (o.checkpoint_every > 0 && r.step % o.checkpoint_every == 0 && r.step < o.steps) save();
  }
  save();
  const auto [error, variance] = evaluate(model, data);
  if (leader) std::printf("held-out mse %.5f | target variance %.5f | unexplained %.2f%%\n", error, variance,
                          100.0 * error / variance);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("train_mlp: a regression MLP trained with loom's Trainer (one process, DDP or ZeRO under mpirun)");
  Options o;
  app.add_option("--inputs", o.model.inputs, "input features")->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.model.hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--layers", o.model.layers, "Linear layers (the last one is the output)")->check(CLI::PositiveNumber);
  app.add_option("--outputs", o.model.outputs, "regression targets")->check(CLI::PositiveNumber);
  app.add_option("--features", o.features, "hidden width of the random teacher")->check(CLI::PositiveNumber);
  app.add_option("--precision", o.precision, "fp32, tf32, fp16 or bf16")->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--device", o.device, "cpu or cuda:N (one process)");
  app.add_option("--batch", o.batch, "samples per micro-batch (per rank)")->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", o.grad_accumulation, "micro-batches per step")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "optimizer steps (in total, also when resuming)")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", o.optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--zero", o.zero, "ZeRO stage when data-parallel: 0 (DDP), 1, 2 or 3")->check(CLI::Range(0, 3));
  app.add_option("--seed", o.seed, "seed of the weights and the data");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save checkpoints here");
  app.add_option("--checkpoint-every", o.checkpoint_every, "save every N steps (0: at the end only)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint in --checkpoint-dir that verifies (the "
               "default whenever --checkpoint-dir is given; kept for scripts that pass it)");
  app.add_option("--log-every", o.log_every, "print a line every N steps")->check(CLI::PositiveNumber);
  try {
    loom::InitOptions init = loom::parse_init_flags(argc, argv);
    CLI11_PARSE(app, argc, argv);
    if (!init.device_type) init.device_type = loom::Device::parse(o.device).type();
    const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
    // A failure is reported while the World lives: its teardown (MPI's) must not delay or hide it.
    try {
      return run(o, *world);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "train_mlp: %s\n", error.what());
      return 1;
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "train_mlp: %s\n", error.what());
    return 1;
  }
}
