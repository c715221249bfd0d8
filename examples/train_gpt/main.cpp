// train_gpt: trains a GPT-2 style model with loom, on the CPU or GPUs, in fp32/tf32/fp16/bf16, in
// one process or data-parallel under a launcher (mpirun, srun, torchrun): each rank reads its own
// part of the data and the gradients are averaged while backward runs (DDP), or reduce-scattered
// with optimizer state and gradients sharded over the ranks (--zero 1, --zero 2). By default it
// learns 2-digit addition (built in, nothing to download) and reports exact-match accuracy;
// --data text:FILE trains on any text file, --data shards:... on llm.c token shards. One log line
// per step (rank 0; tokens/s of the whole job); checkpoints with --checkpoint-dir, --resume.
//   build/examples/train_gpt/train_gpt --steps 400
//   mpirun -np 2 build/examples/train_gpt/train_gpt --batch 4          (2 CPU processes)
//   mpirun -np 2 build/examples/train_gpt/train_gpt --batch 4 --zero 2 (ZeRO-2)
//   mpirun -np 8 build/examples/train_gpt/train_gpt --device cuda ...  (one GPU per rank)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "data_setup.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/shard/memory.hpp"
#include "loom/topo/detect.hpp"
#include "loom/topo/hierarchical.hpp"
#include "loom/loom.hpp"
#include "run_config.hpp"

namespace {

// Dense tensor-core peak of known GPUs in TFLOP/s for the precision, 0 when unknown (no MFU).
double peak_tflops(const loom::Device& device, const std::string& precision) {
  if (!device.is_cuda()) return 0;
  const std::string name = loom::cuda_device_properties(device.index()).name;
  const bool half = precision == "bf16" || precision == "fp16";
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    return half ? 989 : precision == "tf32" ? 494 : 67;
  }
  if (name.find("A100") != std::string::npos) return half ? 312 : precision == "tf32" ? 156 : 19.5;
  return 0;
}

void print_evaluation(std::int64_t step, const train_gpt::Evaluation& e) {
  std::printf("eval step %lld | loss %.4f", static_cast<long long>(step), e.loss);
  if (!e.metric_name.empty()) std::printf(" | %s %.1f%%", e.metric_name.c_str(), 100.0 * e.metric);
  std::printf("\n");
}

// Rank 0 speaks for the job.
class Log {
 public:
  explicit Log(bool leader) : leader_(leader) {}
  template <class... Args>
  void line(const char* format, Args... args) const {
    if (!leader_) return;
    std::printf(format, args...);
    std::fflush(stdout);
  }
  bool leader() const { return leader_; }

 private:
  bool leader_;
};

// Data parallelism: the world communicator made topology-aware (hierarchical collectives where
// the planner predicts they pay), and the reducer's options.
struct DataParallel {
  std::unique_ptr<loom::comm::Communicator> comm;
  loom::ddp::ReducerOptions reducer;
  std::string summary;
};

DataParallel make_data_parallel(const train_gpt::RunConfig& config, loom::World& world) {
  DataParallel dp;
  if (world.size() == 1) {
    loom::require(config.zero == 0, "--zero ", config.zero, " shards over the ranks of a data-parallel job; this is "
                  "one process (launch it with mpirun -np N)");
    return dp;
  }
  const loom::topo::Detection detected = loom::topo::detect_topology(&world.comm());
  dp.comm = loom::topo::make_topology_aware(world.comm(), detected.topology,
                                            loom::topo::parse_algorithm_choice(config.algo));
  loom::ddp::ReducerOptions options;
  options.bucket_bytes = config.bucket_mb > 0 ? static_cast<std::int64_t>(config.bucket_mb * (1 << 20))
                                              : loom::topo::Planner(detected.topology).recommended_bucket_bytes();
  if (config.grad_reduction != "fp32") {
    loom::require(config.zero == 0, "--grad-reduction ", config.grad_reduction, " compresses DDP's all-reduce; ZeRO "
                  "reduce-scatters fp32 gradients (use --zero 0)");
    options.hook = loom::ddp::compression_hook(config.grad_reduction == "bf16" ? loom::DType::bf16 : loom::DType::f16);
  }
  dp.reducer = options;
  dp.summary = std::to_string(detected.topology.hosts.size()) + " host(s) (" + detected.source + "), collectives " +
               config.algo;
  if (config.zero == 0) dp.summary += ", " + std::to_string(options.bucket_bytes >> 20) + " MiB buckets";
  return dp;
}

// "ZeRO-2, model state 1.23 MiB per rank (predicted 1.23 MiB)".
std::string model_state_line(const loom::train::Trainer& trainer) {
  const int stage = trainer.zero_stage();
  char line[160];
  std::snprintf(line, sizeof(line), "%s, model state %.2f MiB per rank (predicted %.2f MiB)",
                stage == 0 ? "DDP" : (stage == 1 ? "ZeRO-1" : "ZeRO-2"),
                static_cast<double>(trainer.held_model_state().total()) / (1 << 20),
                static_cast<double>(trainer.predicted_model_state().total()) / (1 << 20));
  return line;
}

int run(const train_gpt::RunConfig& config, loom::World& world) {
  const Log log(world.rank() == 0);
  // One process uses --device as given; ranks of a job use the device loom::init picked (cuda:<local rank>).
  const loom::Device device = world.size() == 1 ? loom::Device::parse(config.device) : world.device();
  loom::nn::GPTConfig model_config = config.model;
  if (config.data == "addition" || config.data.starts_with("text:")) model_config.vocab_size = 256;
  loom::nn::GPT model(model_config, loom::nn::Precision::parse(config.precision), device, config.seed);
  const DataParallel dp = make_data_parallel(config, world);
  train_gpt::RunData data(config, {.rank = world.rank(), .world = world.size()});
  loom::train::TrainerOptions options = config.trainer_options();
  options.reducer = dp.reducer;
  loom::train::Trainer trainer(model, data.train(), options, dp.comm.get());
  loom::ddp::GradientReducer* const reducer = dp.comm ? trainer.reducer() : nullptr;
  log.line("%s\n", loom::to_string(loom::build_info()).c_str());
  log.line("model: %lld layers, %lld heads, width %lld, context %lld, vocab %lld (%lld parameters), %s on %s\n",
           static_cast<long long>(model_config.layers), static_cast<long long>(model_config.heads),
           static_cast<long long>(model_config.channels), static_cast<long long>(model_config.context),
           static_cast<long long>(model_config.vocab_size), static_cast<long long>(model_config.parameter_count()),
           config.precision.c_str(), device.to_string().c_str());
  if (reducer) {
    log.line("data-parallel: %d ranks (%s), %lld sequences per step (%lld per rank x %lld micro-batches), %d gradient "
             "buckets, %s reduction; %s\n",
             world.size(), std::string(world.comm().backend()).c_str(),
             static_cast<long long>(config.batch * config.grad_accumulation * world.size()),
             static_cast<long long>(config.batch), static_cast<long long>(config.grad_accumulation),
             static_cast<int>(reducer->bucket_layout().size()), config.grad_reduction.c_str(), dp.summary.c_str());
  }
  log.line("%s\n", model_state_line(trainer).c_str());
  if (config.resume) {
    loom::require(!config.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    if (trainer.resume(config.checkpoint_dir)) {
      log.line("resumed from %s at step %lld\n", loom::io::latest_checkpoint(config.checkpoint_dir)->c_str(),
               static_cast<long long>(trainer.steps_done()));
    } else {
      log.line("no checkpoint in %s yet: starting from scratch\n", config.checkpoint_dir.c_str());
    }
  }
  const std::int64_t steps_per_seq = config.seq_len > 0 ? config.seq_len : model_config.context;
  const double peak = peak_tflops(device, config.precision) * world.size();
  const double flops_per_token = model_config.training_flops_per_token(steps_per_seq);
  std::int64_t saved_step = trainer.steps_done();  // nothing new to save before a step has run
  auto save = [&] {  // every rank takes part (ZeRO gathers the optimizer state); rank 0 writes
    if (config.checkpoint_dir.empty() || trainer.steps_done() == saved_step) return;
    const std::string where = trainer.save(config.checkpoint_dir);
    saved_step = trainer.steps_done();
    log.line("saved checkpoint %s\n", where.c_str());
  };
  while (trainer.steps_done() < config.steps) {
    const loom::train::StepResult r = trainer.step();
    if (r.step % config.log_every == 0 || r.step == config.steps) {
      const double tokens_per_second = static_cast<double>(r.tokens) / r.seconds;
      log.line("step %5lld/%lld | loss %.4f | lr %.2e | norm %.4f | %7.1f ms | %8.0f tok/s", static_cast<long long>(r.step),
               static_cast<long long>(config.steps), r.loss, r.lr, r.grad_norm, r.seconds * 1e3, tokens_per_second);
      if (peak > 0) log.line(" | MFU %.1f%%", 100.0 * tokens_per_second * flops_per_token / (peak * 1e12));
      if (r.skipped) log.line(" | skipped (non-finite gradient; loss scale %g)", trainer.loss_scaler().scale());
      log.line("\n");
    }
    if (config.checkpoint_every > 0 && r.step % config.checkpoint_every == 0 && r.step < config.steps) save();
    // Every rank evaluates (the replicas are identical), so none waits in a collective meanwhile.
    if (config.eval_every > 0 && r.step % config.eval_every == 0 && r.step < config.steps) {
      const train_gpt::Evaluation e = data.evaluate(model, false);
      if (log.leader()) print_evaluation(r.step, e);
    }
  }
  save();
  const train_gpt::Evaluation final_eval = data.evaluate(model, true);
  if (!log.leader()) return 0;
  print_evaluation(trainer.steps_done(), final_eval);
  if (trainer.skipped_steps() > 0) {
    std::printf("skipped steps (non-finite gradients): %lld\n", static_cast<long long>(trainer.skipped_steps()));
  }
  std::printf("sample:\n%s\n", final_eval.sample.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("train_gpt: train a GPT-2 style model with loom (default: the built-in addition task on the CPU)");
  train_gpt::RunConfig config;
  config.add_to(app);
  try {
    loom::InitOptions init = loom::parse_init_flags(argc, argv);  // --loom-* flags (see loom/comm/world.hpp)
    CLI11_PARSE(app, argc, argv);
    if (!init.device_type) init.device_type = loom::Device::parse(config.device).type();
    const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
    return run(config, *world);
  } catch (const std::exception& error) {  // loom::Error, and file-system or allocation failures
    std::fprintf(stderr, "train_gpt: %s\n", error.what());
    return 1;
  }
}
