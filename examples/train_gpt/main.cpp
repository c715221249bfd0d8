// train_gpt: trains a GPT-2 style model with loom, on the CPU or GPUs, in fp32/tf32/fp16/bf16, in
// one process or data-parallel under a launcher (mpirun, srun, torchrun): each rank reads its own
// part of the data and the gradients are averaged while backward runs (DDP), or reduce-scattered
// with optimizer state, gradients and parameters sharded over the ranks (--zero 1, 2, 3). By default it
// learns 2-digit addition (built in, nothing to download) and reports exact-match accuracy;
// --data text:FILE trains on any text file, --data shards:... on llm.c token shards. One log line
// per step (rank 0; tokens/s of the whole job); checkpoints with --checkpoint-dir: a run resumes
// from the newest one that verifies, keeps the newest --keep-checkpoints, and on SIGTERM, SIGINT,
// SIGUSR1 or --time-limit finishes its step, saves and exits with code 4. Exit codes (for
// schedulers deciding whether to requeue): 0 done, 1 error, 2 usage (the request cannot run as
// given), 3 diverged (non-finite loss or too many skipped steps; saved first when checkpointing),
// 4 stopped early and saved, 5 stopped early with nothing saved (no --checkpoint-dir). --tp N
// splits every layer over groups of N consecutive ranks (tensor parallelism, Megatron-style) and
// runs data parallelism (DDP or --zero) over the world / N groups that remain.
//   build/examples/train_gpt/train_gpt --steps 400
//   mpirun -np 2 build/examples/train_gpt/train_gpt --batch 4          (2 CPU processes)
//   mpirun -np 2 build/examples/train_gpt/train_gpt --batch 4 --zero 2 (ZeRO-2)
//   mpirun -np 2 build/examples/train_gpt/train_gpt --batch 4 --zero 3 (ZeRO-3)
//   mpirun -np 4 build/examples/train_gpt/train_gpt --tp 2 --zero 1    (2 tensor x 2 data, ZeRO-1)
//   mpirun -np 8 build/examples/train_gpt/train_gpt --device cuda ...  (one GPU per rank)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "run_plan.hpp"
#include "data_setup.hpp"
#include "loom/comm/agreement.hpp"
#include "loom/convert/gpt_weights.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/crypt/key.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/files.hpp"
#include "loom/plan/plan.hpp"
#include "loom/shard/memory.hpp"
#include "loom/telemetry/device_identity.hpp"
#include "loom/topo/detect.hpp"
#include "loom/topo/hierarchical.hpp"
#include "loom/topo/mesh.hpp"
#include "loom/train/stop.hpp"
#include "loom/loom.hpp"
#include "run_config.hpp"
#include "run_audit.hpp"
#include "run_telemetry.hpp"

namespace {

enum ExitCode { exit_done = 0, exit_error = 1, exit_usage = 2, exit_diverged = 3, exit_stopped_saved = 4,
                exit_stopped_unsaved = 5 };

// The dense peak of this GPU in TFLOP/s for the precision from loom-plan's table (0 on the CPU
// or for a GPU the table does not know: no MFU then).
double peak_tflops(const loom::Device& device, const std::string& precision) {
  if (!device.is_cuda()) return 0;
  const loom::CudaDeviceProperties p = loom::cuda_device_properties(device.index());
  loom::topo::Gpu gpu;
  gpu.name = p.name;
  gpu.arch = "sm_" + std::to_string(p.compute_major) + std::to_string(p.compute_minor);
  return loom::plan::peak_tflops(gpu, precision).value_or(0.0);
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

// The closing line's account of the run's checkpoint saves: what training waited for, and what the
// writes took (in the background with --async-save).
struct SaveTotals {
  int count = 0, background = 0;
  double blocked = 0, most_blocked = 0, writing = 0;
  void add(const loom::io::SaveReport& s) {
    ++count;
    background += s.asynchronous ? 1 : 0;
    blocked += s.blocked_seconds;
    most_blocked = std::max(most_blocked, s.blocked_seconds);
    writing += s.write_seconds;
  }
  std::string describe() const {
    char line[256];
    std::snprintf(line, sizeof line, "checkpoints: %d saved (%d in the background); training blocked %.3f s in all "
                  "(at most %.3f s per save); writing took %.2f s in all", count, background, blocked, most_blocked,
                  writing);
    return line;
  }
};

// The job's groups: the data x tensor mesh (tensor groups inside hosts), the data group made
// topology-aware (hierarchical collectives where the planner predicts they pay), and the
// reducer's options. Without --tp the data group is the world.
struct DataParallel {
  std::unique_ptr<loom::topo::DeviceMesh> mesh;
  std::unique_ptr<loom::comm::Communicator> comm;  // the data group (null: one process)
  loom::comm::Communicator* world = nullptr;       // every rank (null: one process)
  loom::comm::Communicator* tensor = nullptr;      // the tensor group (null: no tensor parallelism)
  loom::ddp::ReducerOptions reducer;
  std::unique_ptr<loom::topo::Planner> planner;  // the data group's cost model (what its collectives should take)
  std::string summary;
  int data_rank = 0, data_ranks = 1;
};

DataParallel make_data_parallel(const train_gpt::RunConfig& config, loom::World& world) {
  DataParallel dp;
  if (world.size() == 1) {
    loom::require(config.zero == 0, "--zero ", config.zero, " shards over the ranks of a data-parallel job; this is "
                  "one process (launch it with mpirun -np N)");
    loom::require(config.tensor_parallel == 1, "--tp ", config.tensor_parallel, " splits the layers over that many "
                  "ranks; this is one process (launch it with mpirun -np N, N a multiple of ", config.tensor_parallel,
                  ")");
    return dp;
  }
  const loom::topo::Detection detected = loom::topo::detect_topology(&world.comm());
  dp.world = &world.comm();
  loom::comm::Communicator* data = &world.comm();
  loom::topo::Topology data_topology = detected.topology;
  if (config.tensor_parallel > 1) {
    dp.mesh = std::make_unique<loom::topo::DeviceMesh>(
        world.comm(), loom::topo::MeshOptions{config.tensor_parallel, config.tensor_across_hosts}, &detected.topology);
    data = &dp.mesh->data();
    dp.tensor = &dp.mesh->tensor();
    data_topology = loom::topo::data_group_topology(detected.topology, dp.mesh->shape(), dp.mesh->coords().tensor);
  }
  dp.data_rank = data->rank();
  dp.data_ranks = data->size();
  dp.comm = loom::topo::make_topology_aware(*data, data_topology, loom::topo::parse_algorithm_choice(config.algo));
  dp.planner = std::make_unique<loom::topo::Planner>(data_topology);
  loom::ddp::ReducerOptions options;
  options.bucket_bytes = config.bucket_mb > 0 ? static_cast<std::int64_t>(config.bucket_mb * (1 << 20))
                                              : loom::topo::Planner(detected.topology).recommended_bucket_bytes();
  loom::require(config.keep_gathered == "none" || config.zero == 3, "--keep-gathered ", config.keep_gathered,
                " applies to --zero 3 (the other stages keep every value)");
  if (config.grad_reduction != "fp32" && config.zero == 0) {
    options.hook = loom::ddp::compression_hook(config.grad_reduction == "bf16" ? loom::DType::bf16 : loom::DType::f16);
  } else if (config.grad_reduction != "fp32") {
    loom::require(config.zero >= 2 && config.grad_reduction == "bf16", "--grad-reduction ", config.grad_reduction,
                  " with --zero ", config.zero, ": ZeRO-2 and 3 reduce-scatter in fp32 or bf16, ZeRO-1 in fp32");
  }
  dp.reducer = options;
  dp.summary = std::to_string(detected.topology.hosts.size()) + " host(s) (" + detected.source + "), collectives " +
               config.algo;
  if (config.zero == 0) dp.summary += ", " + std::to_string(options.bucket_bytes >> 20) + " MiB buckets";
  return dp;
}

// "ZeRO-3, model state 1.23 MiB per rank (predicted 1.23 MiB): values 0.12, gradients 0.25, optimizer
// 0.75, unit buffers 0.11 (predicted 0.11)". Unit buffers are allocated by the first step.
std::string model_state_line(const loom::train::Trainer& trainer) {
  const int stage = trainer.zero_stage();
  const loom::shard::ModelStateBytes held = trainer.held_model_state(), predicted = trainer.predicted_model_state();
  const auto mib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  char line[320];
  std::snprintf(line, sizeof(line), "%s, model state %.2f MiB per rank (predicted %.2f MiB): values %.2f, gradients "
                "%.2f, optimizer %.2f, unit buffers %.2f (predicted %.2f)",
                stage == 0 ? "DDP" : ("ZeRO-" + std::to_string(stage)).c_str(), mib(held.total()),
                mib(predicted.total()), mib(held.values), mib(held.gradients), mib(held.optimizer()),
                mib(held.buffers), mib(predicted.buffers));
  return line;
}

// Removes what interrupted saves left in --checkpoint-dir, then resumes from the newest checkpoint
// there that verifies (--resume auto) or makes sure there is none (--resume never). Returns the
// step the run starts at.
std::int64_t resume_or_start(const train_gpt::RunConfig& config, loom::train::Trainer& trainer,
                             loom::comm::Communicator* comm, const Log& log, train_gpt::RunAudit& audit) {
  const std::string& dir = config.checkpoint_dir;
  if (dir.empty()) return 0;
  if (log.leader()) {
    for (const std::string& stale : loom::io::remove_stale_temporaries(dir)) {
      log.line("removed %s, left by an interrupted save\n", stale.c_str());
    }
  }
  if (comm != nullptr) loom::comm::all_reduce_value(*comm, 0, loom::comm::ReduceOp::max);  // after the clean-up
  if (config.resume == "never") {
    loom::require(!loom::io::find_resumable_checkpoint(dir).any, "--resume never: '", dir, "' already holds "
                  "checkpoints; resume from them (--resume auto, the default) or choose another --checkpoint-dir");
    return 0;
  }
  const loom::train::Trainer::ResumeOutcome outcome = trainer.resume(dir);
  for (const std::string& skipped : outcome.skipped) log.line("passed over: %s\n", skipped.c_str());
  if (!outcome) {
    log.line("no checkpoint in %s yet: starting from scratch\n", dir.c_str());
    return 0;
  }
  log.line("resumed from %s at step %lld\n", outcome.checkpoint.c_str(), static_cast<long long>(trainer.steps_done()));
  audit.checkpoint_loaded(outcome.checkpoint, trainer.steps_done());
  loom::require(trainer.steps_done() < config.steps, "--steps ", config.steps, " is not beyond step ",
                trainer.steps_done(), " of the checkpoint '", outcome.checkpoint, "': nothing to train (raise --steps "
                "to go on)");
  return trainer.steps_done();
}

// --init-from: the weights, and the architecture they set (flags given as well must agree).
std::optional<loom::convert::GPTWeights> initial_weights(train_gpt::RunConfig& config) {
  if (config.init_from.empty()) return std::nullopt;
  loom::convert::GPTWeights weights = loom::convert::read_gpt_weights(config.init_from);
  const loom::nn::GPTConfig& theirs = weights.config;
  loom::nn::GPTConfig& mine = config.model;
  for (const auto& [flag, value, wanted] :
       {std::tuple{"--layers", &mine.layers, theirs.layers}, std::tuple{"--heads", &mine.heads, theirs.heads},
        std::tuple{"--channels", &mine.channels, theirs.channels}, std::tuple{"--context", &mine.context, theirs.context},
        std::tuple{"--vocab", &mine.vocab_size, theirs.vocab_size}}) {
    const bool given = std::find(config.architecture_flags.begin(), config.architecture_flags.end(), flag) !=
                       config.architecture_flags.end();
    loom::require(!given || *value == wanted, flag, " ", *value, " disagrees with ", config.init_from, ", whose model "
                  "has ", wanted, " (--init-from sets the architecture: leave ", flag, " out)");
    *value = wanted;
  }
  // The addition task and text: data are bytes, which only a model of 256 tokens reads.
  loom::require(config.data.starts_with("shards:") || theirs.vocab_size == 256, "--init-from ", config.init_from,
                " has a vocabulary of ", theirs.vocab_size, " tokens, but --data ", config.data, " is bytes (256): "
                "fine-tune on token shards (--data shards:GLOB) made with the model's tokenizer");
  return weights;
}

int run(const train_gpt::RunConfig& given, loom::World& world, train_gpt::RunAudit& audit) {
  const Log log(world.rank() == 0);
  train_gpt::RunConfig config = given;
  std::optional<loom::convert::GPTWeights> initial = initial_weights(config);
  // One process uses --device as given; ranks of a job use the device loom::init picked (cuda:<local rank>).
  const loom::Device device = world.size() == 1 ? loom::Device::parse(config.device) : world.device();
  loom::nn::GPTConfig model_config = config.model;
  if (config.data == "addition" || config.data.starts_with("text:")) model_config.vocab_size = 256;
  model_config.checkpointing = loom::nn::parse_activation_checkpointing(config.activation_checkpointing);
  model_config.checkpoint_every = config.recompute_every;
  const DataParallel dp = make_data_parallel(config, world);
  loom::train::TrainerOptions options = config.trainer_options();
  options.reducer = dp.reducer;
  // Built in the layout its ZeRO stage trains in: a rank never holds more than its share. Under
  // tensor parallelism each rank makes its blocks of every split layer.
  loom::nn::GPT model(model_config, loom::nn::Precision::parse(config.precision), device, config.seed,
                      loom::shard::space_layout(options.zero, dp.comm.get()), dp.tensor);
  if (initial) {  // before the trainer, whose optimizer takes its fp32 masters from the values
    loom::convert::load_gpt_weights(model, *initial);
    log.line("initial weights: %s\n", initial->origin.c_str());
    initial.reset();
  }
  // --batch auto sizes the micro-batch now that the model exists, before the data and trainer
  // allocate anything for it.
  train_gpt::RunConfig sized = config;
  std::string batch_line;
  const train_gpt::RunShape shape{.seq_len = config.seq_len, .options = options, .data_ranks = dp.data_ranks,
                                  .tensor_ranks = config.tensor_parallel};
  if (config.batch_auto) {
    const train_gpt::BatchChoice choice = train_gpt::choose_batch(model, shape, config.batch_per_step, dp.world);
    sized.batch = choice.micro_batch;
    sized.grad_accumulation = options.grad_accumulation = choice.grad_accumulation;
    batch_line = choice.line;
  }
  const train_gpt::RunMemory planned = train_gpt::predict_run_memory(model, shape, sized.batch);
  if (config.plan_only) {
    log.line("%s", train_gpt::plan_report(model, shape, sized.batch, sized.grad_accumulation, config.precision).c_str());
    return 0;
  }
  // The ranks of a tensor group read the same batches: the data is split over the data group.
  train_gpt::RunData data(sized, {.rank = dp.data_rank, .world = dp.data_ranks});
  loom::train::Trainer trainer(model, data.train(), options, {dp.world, dp.comm.get(), dp.tensor});
  log.line("%s\n", loom::to_string(loom::build_info()).c_str());
  const std::string recompute =
      model_config.checkpointing == loom::nn::ActivationCheckpointing::none
          ? std::string()
          : ", activation checkpointing " + loom::nn::to_string(model_config.checkpointing) +
                (model_config.checkpoint_every > 1 ? " every " + std::to_string(model_config.checkpoint_every) +
                                                         " blocks"
                                                   : " (every block)");
  log.line("model: %lld layers, %lld heads, width %lld, context %lld, vocab %lld (%lld parameters), %s on %s%s\n",
           static_cast<long long>(model_config.layers), static_cast<long long>(model_config.heads),
           static_cast<long long>(model_config.channels), static_cast<long long>(model_config.context),
           static_cast<long long>(model_config.vocab_size), static_cast<long long>(model_config.parameter_count()),
           config.precision.c_str(), device.to_string().c_str(), recompute.c_str());
  const std::string devices = loom::telemetry::describe_devices(device);
  log.line("%s\n", devices.c_str());
  if (!batch_line.empty()) log.line("%s\n", batch_line.c_str());
  log.line("%s\n", train_gpt::plan_line(planned).c_str());
  log.line("training: %s\n", loom::train::describe(options).c_str());
  if (const auto key = loom::io::at_rest_key()) {
    log.line("encryption at rest: key %s; checkpoints are written encrypted, encrypted shards are decrypted in the "
             "loader; plain checkpoints and shards are %s\n", key->id_hex().c_str(),
             loom::io::plain_input_allowed() ? "read too (--allow-plain-input)" : "refused");
  }
  if (!data.description().empty()) log.line("%s\n", data.description().c_str());
  if (dp.mesh) log.line("%s\n", dp.mesh->describe().c_str());
  if (dp.comm) {
    log.line("data-parallel: %d ranks (%s), %lld sequences per step (%lld per rank x %lld micro-batches), %d gradient "
             "buckets, %s reduction; %s\n",
             dp.data_ranks, world.backend_choice().c_str(),
             static_cast<long long>(sized.batch * sized.grad_accumulation * dp.data_ranks),
             static_cast<long long>(sized.batch), static_cast<long long>(sized.grad_accumulation),
             static_cast<int>(trainer.gradient_sync().bucket_layout().size()), config.grad_reduction.c_str(), dp.summary.c_str());
  }
  log.line("%s\n", model_state_line(trainer).c_str());
  if (audit.enabled()) {
    // What the run is, as one line: the digest in the audit log identifies it.
    const nlohmann::json configuration = {
        {"model", {{"layers", model_config.layers}, {"heads", model_config.heads}, {"channels", model_config.channels},
                   {"context", model_config.context}, {"vocab", model_config.vocab_size}}},
        {"precision", config.precision}, {"training", loom::train::describe(options)}, {"data", config.data},
        {"batch", sized.batch}, {"grad_accumulation", sized.grad_accumulation}, {"seed", config.seed},
        {"steps", config.steps}, {"ranks", world.size()}, {"tensor_parallel", config.tensor_parallel},
        {"init_from", config.init_from}};
    audit.start(devices, configuration.dump(), data.files());
    if (!config.init_from.empty()) audit.weights_loaded(config.init_from);
    log.line("audit log: %s (%s)\n", config.audit_log.c_str(),
             loom::io::at_rest_key() ? "keyed with the run's key" : "unkeyed: give --key-file to key it");
  }
  const std::int64_t first_step = resume_or_start(config, trainer, dp.world, log, audit);
  audit.progress(first_step);
  const std::int64_t skipped_at_start = trainer.skipped_steps();
  const std::int64_t steps_per_seq = config.seq_len > 0 ? config.seq_len : model_config.context;
  const double peak = peak_tflops(device, config.precision) * world.size();
  const double flops_per_token = model_config.training_flops_per_token(steps_per_seq);
  const double recompute_per_token = model_config.recompute_flops_per_token(steps_per_seq);
  std::int64_t saved_step = trainer.steps_done();  // nothing new to save before a step has run
  std::string saved_where;
  SaveTotals totals;
  auto committed = [&](const loom::io::SaveReport& s) {  // a save is on disk: log it, prune the old ones
    saved_where = s.where;
    totals.add(s);
    audit.checkpoint_written(s);
    log.line("saved checkpoint %s (%s: training blocked %.3f s, writing took %.2f s, %.1f MB per rank)\n",
             s.where.c_str(), s.asynchronous ? "in the background" : "synchronously", s.blocked_seconds,
             s.write_seconds, static_cast<double>(s.bytes) / 1e6);
    if (!log.leader()) return;
    // A checkpoint's digest is taken (in the background) before it can be deleted.
    audit.settle_before_deleting(
        loom::io::prunable_checkpoints(config.checkpoint_dir, config.keep_checkpoints, config.keep_every));
    for (const std::string& old : loom::io::prune_checkpoints(config.checkpoint_dir, config.keep_checkpoints,
                                                              config.keep_every)) {
      log.line("deleted old checkpoint %s (--keep-checkpoints %d)\n", old.c_str(), config.keep_checkpoints);
    }
  };
  // Every rank takes part and writes its own part. A background save is logged when it commits
  // (checked after every step). A periodic save waits for the one in flight, and its failure ends
  // the run (exit 1) as a synchronous save's would. A save before exiting (stop, divergence, end)
  // also waits for it, but a failure there is logged and the exit's own step saved regardless.
  auto save = [&](bool periodic) {
    if (config.checkpoint_dir.empty()) return;
    if (periodic && config.async_save) {
      if (trainer.steps_done() == saved_step) return;
      saved_step = trainer.steps_done();
      trainer.save_async(config.checkpoint_dir);
      for (const loom::io::SaveReport& s : trainer.finished_saves()) committed(s);  // the one it waited for
      log.line("checkpoint of step %lld: copied to host memory, writing in the background\n",
               static_cast<long long>(saved_step));
      return;
    }
    if (!periodic) {
      try {
        trainer.wait_for_save();
      } catch (const loom::Error& error) {  // agreed: every rank takes this branch
        log.line("the background save of step %lld failed: %s; saving step %lld now\n",
                 static_cast<long long>(saved_step), error.what(), static_cast<long long>(trainer.steps_done()));
        saved_step = -1;
      }
      for (const loom::io::SaveReport& s : trainer.finished_saves()) committed(s);
    }
    if (trainer.steps_done() == saved_step) return;
    saved_step = trainer.steps_done();
    const loom::io::SaveReport s = trainer.save(config.checkpoint_dir);
    for (const loom::io::SaveReport& earlier : trainer.finished_saves()) committed(earlier);
    committed(s);
  };
  train_gpt::RunTelemetry telemetry(config, device, world.rank(), world.launch().local_rank, dp.planner.get(),
                                    dp.comm.get());
  log.line("%s\n", telemetry.sampling_line().c_str());
  const loom::train::StopRequests stops(config.time_limit);
  bool mfu_warned = false;
  double interval_seconds = 0;  // the steps' time since the last logged step
  while (trainer.steps_done() < config.steps) {
    if (device.is_cpu()) loom::reset_cpu_memory_peak();  // (this process's: the step line gives this step's peak)
    const loom::train::StepResult r = trainer.step();
    audit.progress(r.step);
    // The first batch is always waited for (the loader starts with it): judge the loader after it.
    if (r.step == first_step + 1) data.take_loader_stats();
    interval_seconds += r.seconds;
    if (r.stragglers) {
      for (const loom::telemetry::StragglerFinding& f : r.stragglers->findings) {
        log.line("straggler at step %lld: %s\n", static_cast<long long>(r.step), loom::telemetry::describe(f).c_str());
      }
    }
    if (r.step == first_step + 1 && dp.comm) log.line("after the first step: %s\n", model_state_line(trainer).c_str());
    const bool logged = r.step % config.log_every == 0 || r.step == config.steps;
    const double tokens_per_second = static_cast<double>(r.tokens) / r.seconds;
    std::optional<double> mfu, hfu;
    if (peak > 0) {
      mfu = tokens_per_second * flops_per_token / (peak * 1e12);
      hfu = tokens_per_second * (flops_per_token + recompute_per_token) / (peak * 1e12);
      // Model FLOPs over a dense peak cannot pass 1: if they do, the table's peak or the clock is wrong.
      if (*hfu > 1 && !mfu_warned) {
        mfu_warned = true;
        log.line("MFU: %.0f%% of %s's dense %s peak at step %lld is impossible: the peak table's %.0f TFLOP/s per GPU "
                 "is too low for this GPU, or the step's time is wrong\n", 100 * *hfu, device.to_string().c_str(),
                 config.precision.c_str(), static_cast<long long>(r.step), peak / world.size());
      }
    }
    for (const std::string& warning : telemetry.step(r, trainer, logged, mfu, hfu)) {
      log.line("warning at step %lld: %s\n", static_cast<long long>(r.step), warning.c_str());
    }
    if (logged) {
      log.line("step %5lld/%lld | loss %.4f | lr %.2e | norm %.4f | %7.1f ms | %8.0f tok/s", static_cast<long long>(r.step),
               static_cast<long long>(config.steps), r.loss, r.lr, r.grad_norm, r.seconds * 1e3, tokens_per_second);
      if (mfu) log.line(" | MFU %.1f%%", 100.0 * *mfu);
      if (r.memory_peak_total > 0) {  // host memory, by category (the process's)
        const auto [category, bytes] = loom::train::largest_category(r);
        log.line(" | mem %.1f MiB (%s %.1f)", static_cast<double>(r.memory_peak_total) / (1 << 20),
                 std::string(loom::to_string(category)).c_str(), static_cast<double>(bytes) / (1 << 20));
      }
      if (r.skipped) log.line(" | skipped (non-finite gradient; loss scale %g)", trainer.loss_scaler().scale());
      log.line(" | data %.2f ms\n", 1e3 * r.phases[loom::telemetry::Phase::data]);
      // A loader that falls behind costs the GPUs more than 1% of the time: say so, with the figures.
      const loom::data::LoaderStats loader = data.take_loader_stats();
      if (loader.waited > 0 && loader.wait_seconds > 0.01 * interval_seconds) {
        log.line("data: the loader fell behind: the steps waited for %lld of the last %lld batches, %.1f ms in all "
                 "(%.1f%% of their time); raise --prefetch (%d), or move the data to faster storage\n",
                 static_cast<long long>(loader.waited), static_cast<long long>(loader.batches), 1e3 * loader.wait_seconds,
                 100 * loader.wait_seconds / interval_seconds, config.prefetch);
      }
      interval_seconds = 0;
    }
    // The loss and the skip count are the same on every rank, so they all decide alike.
    const std::int64_t run_steps = trainer.steps_done() - first_step;
    const double skipped = static_cast<double>(trainer.skipped_steps() - skipped_at_start);
    if (!std::isfinite(r.loss) || (run_steps >= 10 && skipped > config.max_skipped_fraction * static_cast<double>(run_steps))) {
      save(false);  // the weights are the last good ones: skipped steps change nothing
      log.line("diverged at step %lld: %s; %s\n", static_cast<long long>(r.step),
               std::isfinite(r.loss) ? (std::to_string(static_cast<long long>(skipped)) + " of " +
                                        std::to_string(static_cast<long long>(run_steps)) +
                                        " steps skipped for non-finite gradients (--max-skipped-fraction " +
                                        std::to_string(config.max_skipped_fraction) + ")").c_str()
                                     : "the loss is not finite",
               saved_where.empty() ? "nothing saved (no --checkpoint-dir)" : ("last good state in " + saved_where).c_str());
      return exit_diverged;
    }
    if (const loom::train::StopRequest stop = stops.poll(dp.world)) {
      const auto start = std::chrono::steady_clock::now();
      save(false);
      const double save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      audit.stopped(stop.describe(), saved_where.empty() ? "nothing" : saved_where);
      if (config.checkpoint_dir.empty()) {
        log.line("stopped by %s after step %lld; nothing saved (no --checkpoint-dir)\n", stop.describe().c_str(),
                 static_cast<long long>(r.step));
        return exit_stopped_unsaved;
      }
      log.line("stopped by %s after step %lld: checkpoint %s committed %.2f s after the %s (save %.2f s); resume "
               "with the same --checkpoint-dir\n",
               stop.describe().c_str(), static_cast<long long>(r.step), saved_where.c_str(),
               stop.seconds_since + save_seconds, stop.reason == loom::train::StopReason::signal ? "signal" : "limit",
               save_seconds);
      return exit_stopped_saved;
    }
    for (const loom::io::SaveReport& s : trainer.finished_saves()) committed(s);
    if (config.checkpoint_every > 0 && r.step % config.checkpoint_every == 0 && r.step < config.steps) save(true);
    // Every rank evaluates (the replicas are identical), so none waits in a collective meanwhile.
    if (config.eval_every > 0 && r.step % config.eval_every == 0 && r.step < config.steps) {
      const train_gpt::Evaluation e = data.evaluate(model, false);
      if (log.leader()) print_evaluation(r.step, e);
    }
  }
  save(false);
  if (totals.count > 0) log.line("%s\n", totals.describe().c_str());
  if (const std::string gpu = telemetry.gpu_summary(); !gpu.empty()) log.line("%s\n", gpu.c_str());
  if (!config.report_file.empty()) {
    loom::plan::PlanRequest request;
    request.model = model_config;
    request.precision = config.precision == "fp32" || config.precision == "tf32" || config.precision == "fp16"
                            ? config.precision : "bf16";
    request.optimizer = options.optimizer;
    request.micro_batch = sized.batch;
    request.grad_accum = sized.grad_accumulation;
    std::optional<double> run_mfu;
    if (peak > 0) run_mfu = telemetry.run_tokens_per_second() * flops_per_token / (peak * 1e12);
    const std::string job = "GPT " + std::to_string(model_config.layers) + " layers x " +
                            std::to_string(model_config.channels) + " channels, context " +
                            std::to_string(model_config.context) + ", " + config.precision + ", " +
                            std::to_string(sized.batch) + " sequences x " + std::to_string(sized.grad_accumulation) +
                            " micro-batches per rank, " + std::to_string(world.size()) + " rank(s), ZeRO stage " +
                            std::to_string(config.zero) + ", TP " + std::to_string(config.tensor_parallel);
    telemetry.report(config.report_file, job, device, dp.world, planned.usable(), request, run_mfu);
    log.line("wrote the right-sizing report %s (and %s.json)\n", config.report_file.c_str(), config.report_file.c_str());
  }
  // The replicas end identical, bit for bit (DDP, ZeRO-1/2; ZeRO-3's ranks hold slices, not replicas).
  if (dp.comm && model.parameter_space().value_mode() == loom::model::ValueMode::full) {
    loom::ddp::verify_same_values(*dp.comm, model.parameter_space());
    log.line("replicas: every rank holds the same values (checksums compared)\n");
  }
  const train_gpt::Evaluation final_eval = data.evaluate(model, true);
  if (!log.leader()) return exit_done;
  print_evaluation(trainer.steps_done(), final_eval);
  if (trainer.skipped_steps() > 0) {
    std::printf("skipped steps (non-finite gradients): %lld\n", static_cast<long long>(trainer.skipped_steps()));
  }
  std::printf("sample:\n%s\n", final_eval.sample.c_str());
  return exit_done;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("train_gpt: train a GPT-2 style model with loom (default: the built-in addition task on the CPU)");
  train_gpt::RunConfig config;
  config.add_to(app);
  // The error, and the exit code it gives.
  const auto report = [](const std::exception& error) {
    std::fprintf(stderr, "train_gpt: %s\n", error.what());
    const auto* loom_error = dynamic_cast<const loom::Error*>(&error);
    return loom_error && loom_error->category() == loom::ErrorCategory::invalid_argument ? exit_usage : exit_error;
  };
  try {
    loom::InitOptions init = loom::parse_init_flags(argc, argv);  // --loom-* flags (see loom/comm/world.hpp)
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& error) {
      return app.exit(error) == 0 ? exit_done : exit_usage;  // --help is not an error
    }
    if (config.batch_auto && app.count("--grad-accum") > 0) {
      std::fprintf(stderr, "train_gpt: --grad-accum with --batch auto: auto chooses the accumulation; give the sequences "
                   "per rank per step with --batch-per-step\n");
      return exit_usage;
    }
    if (!config.batch_auto && app.count("--batch-per-step") > 0) {
      std::fprintf(stderr, "train_gpt: --batch-per-step goes with --batch auto; without it, the step is --batch x "
                   "--grad-accum\n");
      return exit_usage;
    }
    for (const char* flag : {"--layers", "--heads", "--channels", "--context", "--vocab"}) {
      if (app.count(flag) > 0) config.architecture_flags.emplace_back(flag);
    }
    if (!init.device_type) init.device_type = loom::Device::parse(config.device).type();
    loom::io::set_group_readable(config.group_readable);
    // The key before anything starts: a key file others may read is refused here, by name. The
    // rendezvous reads it from the environment, so the flag sets that too.
    if (std::optional<loom::crypt::SecretKey> key = loom::crypt::SecretKey::from_flag_or_environment(config.key_file)) {
      loom::io::set_at_rest_key(std::make_shared<const loom::crypt::SecretKey>(std::move(*key)));
      loom::io::set_plain_input_allowed(config.allow_plain_input);
      if (!config.key_file.empty()) ::setenv("LOOM_KEY_FILE", config.key_file.c_str(), 1);
    }
    const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
    // A failure is reported while the World lives: its teardown (MPI's) must not delay or hide it.
    train_gpt::RunAudit audit(config, *world, argc, argv);
    try {
      const int code = run(config, *world, audit);
      audit.end(code, "", true);
      return code;
    } catch (const std::exception& error) {  // loom's errors; file-system or allocation failures
      const int code = report(error);
      try {
        audit.end(code, error.what(), false);
      } catch (const std::exception& also) {
        std::fprintf(stderr, "train_gpt: the audit log's end record: %s\n", also.what());
      }
      return code;
    }
  } catch (const std::exception& error) {
    return report(error);
  }
}
