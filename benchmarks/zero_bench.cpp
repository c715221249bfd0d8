// zero_bench: what ZeRO costs and saves. For DDP, ZeRO-1 and ZeRO-2 at each rank count it reports
// the training step of train_bench's default GPT (AdamW), the same step without communication on
// a second model in the same job (alternating, so both see the same machine), what data
// parallelism exposed (step - compute), the time blocked waiting for reductions, and the model
// state each rank holds: measured by the CPU allocator (live bytes that building the model and the
// trainer added) against shard::model_state_bytes, the optimizer's share, and the peak of the
// training step (activations and, for ZeRO-2, the gradient pool included).
//
//   build/benchmarks/zero_bench --json zero.json           # launches mpirun -np 1..4 itself
//   mpirun -np 8 build/benchmarks/zero_bench --device cuda  # one job, as launched
//
// Like ddp_bench it starts one `mpirun -np N` job per rank count (threads = cores / ranks), each
// measuring every stage. The target of issue 14: ZeRO-2's step within 1.15x DDP's at 2 ranks.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.hpp"
#include "loom/comm/launch.hpp"
#include "loom/comm/mpi.hpp"
#include "loom/core/allocator.hpp"
#include "loom/core/build_info.hpp"
#include "loom/core/error.hpp"
#include "loom/loom.hpp"
#include "loom/train/trainer.hpp"
#include "repeat_batch.hpp"
#include "self_launch.hpp"

namespace {

struct Options {
  std::vector<int> ranks{1, 2, 3, 4};
  std::vector<int> stages{0, 1, 2};
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int steps = 20, warmup = 3;
  std::int64_t layers = 4, channels = 128, batch = 8;
  std::string device = "cpu", precision = "fp32", json_path, worker_json;
  bool worker = false;
};

loom::nn::GPTConfig model_config(const Options& o) {
  return {.vocab_size = 256, .context = 128, .layers = o.layers, .heads = 4, .channels = o.channels};
}

loom::train::TrainerOptions trainer_options(int stage) {
  loom::train::TrainerOptions options;
  options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = 1000000};
  options.zero = stage;
  return options;
}

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

nlohmann::json measure_stage(const Options& o, loom::World& world, int stage) {
  const loom::nn::GPTConfig config = model_config(o);
  const loom::model::Precision precision = loom::model::Precision::parse(o.precision);
  std::mt19937 rng(static_cast<std::uint32_t>(1 + world.rank()));
  loom::bench::RepeatBatch data(loom::bench::random_batch(o.batch, config.context, config.vocab_size, rng),
                                config.vocab_size);
  const std::int64_t live_before = loom::cpu_memory_stats().live_bytes;
  loom::nn::GPT model(config, precision, world.device());
  loom::comm::Communicator* comm = world.size() > 1 || stage > 0 ? &world.comm() : nullptr;
  loom::train::Trainer trainer(model, data, trainer_options(stage), comm);
  const std::int64_t state_measured = loom::cpu_memory_stats().live_bytes - live_before;
  loom::reset_cpu_memory_peak();
  for (int i = 0; i < o.warmup; ++i) trainer.step();
  const std::int64_t peak = loom::cpu_memory_stats().peak_bytes - live_before;

  loom::nn::GPT alone_model(config, precision, world.device());
  loom::bench::RepeatBatch alone_data(data.next(), config.vocab_size);
  loom::train::Trainer alone(alone_model, alone_data, trainer_options(0));
  for (int i = 0; i < o.warmup; ++i) alone.step();
  std::vector<double> step, compute, wait;
  for (int i = 0; i < o.steps; ++i) {
    compute.push_back(alone.step().seconds);
    step.push_back(trainer.step().seconds);
    wait.push_back(trainer.gradient_sync().stats().synchronize_seconds);
  }
  const double step_s = loom::bench::median(step), compute_s = loom::bench::median(compute);
  const loom::shard::ModelStateBytes held = trainer.held_model_state(), predicted = trainer.predicted_model_state();
  const bool cpu = world.device().is_cpu();  // the CPU allocator sees only CPU memory
  return {{"ranks", world.size()},
          {"stage", stage},
          {"parameters", model.parameter_space().parameter_elements()},
          {"step_ms", step_s * 1e3},
          {"compute_ms", compute_s * 1e3},
          {"exposed_comm_ms", (step_s - compute_s) * 1e3},
          {"synchronize_wait_ms", loom::bench::median(wait) * 1e3},
          {"tokens_per_s", static_cast<double>(o.batch * config.context * world.size()) / step_s},
          {"state_bytes_measured", cpu ? state_measured : held.total()},
          {"state_bytes_measured_by", cpu ? "cpu allocator" : "tensor sizes"},
          {"state_bytes_predicted", predicted.total()},
          {"optimizer_bytes", held.optimizer()},
          {"gradient_bytes", held.gradients},
          {"gradient_pool_buffers", trainer.zero_engine() != nullptr ? trainer.zero_engine()->pool_buffers() : 0},
          {"peak_bytes", cpu ? peak : 0}};
}

int run_worker(const Options& o, loom::InitOptions init, int argc, char** argv) {
  if (!init.device_type) init.device_type = loom::Device::parse(o.device).type();
  const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
  nlohmann::json rows = nlohmann::json::array();
  for (const int stage : o.stages) {
    nlohmann::json row = measure_stage(o, *world, stage);
    if (world->rank() == 0) rows.push_back(row);
  }
  if (world->rank() == 0 && !o.worker_json.empty()) loom::bench::write_json(o.worker_json, rows);
  if (world->rank() == 0 && o.worker_json.empty()) std::printf("%s\n", rows.dump(2).c_str());
  return 0;
}

void print_table(const nlohmann::json& rows) {
  std::printf("\n%5s %7s %6s %9s %10s %10s %9s %8s %12s %12s %10s %9s %10s\n", "ranks", "threads", "stage", "step ms",
              "compute ms", "exposed ms", "sync wait", "vs DDP", "state MiB", "predicted", "optim MiB", "peak MiB",
              "tok/s");
  for (const auto& r : rows) {
    double ddp_step = 0;
    for (const auto& d : rows) {
      if (d["ranks"] == r["ranks"] && d["stage"] == 0) ddp_step = d["step_ms"].get<double>();
    }
    char versus[32] = "-";
    if (ddp_step > 0) std::snprintf(versus, sizeof(versus), "%.2fx", r["step_ms"].get<double>() / ddp_step);
    std::printf("%5d %7d %6s %9.2f %10.2f %10.3f %9.3f %8s %12.3f %12.3f %10.3f %9.2f %10.0f\n", r["ranks"].get<int>(),
                r["threads_per_rank"].get<int>(),
                r["stage"] == 0 ? "DDP" : (r["stage"] == 1 ? "ZeRO-1" : "ZeRO-2"), r["step_ms"].get<double>(),
                r["compute_ms"].get<double>(), r["exposed_comm_ms"].get<double>(),
                r["synchronize_wait_ms"].get<double>(), versus, mib(r["state_bytes_measured"].get<std::int64_t>()),
                mib(r["state_bytes_predicted"].get<std::int64_t>()), mib(r["optimizer_bytes"].get<std::int64_t>()),
                mib(r["peak_bytes"].get<std::int64_t>()), r["tokens_per_s"].get<double>());
  }
}

int run_orchestrator(const Options& o) {
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("zero_bench: %d cores; each rank count is one job (mpirun -np RANKS, OMP_NUM_THREADS = cores / ranks); "
              "GPT %lld layers x %lld, batch %lld x 128 per rank, AdamW, %s\n",
              o.cores, static_cast<long long>(o.layers), static_cast<long long>(o.channels),
              static_cast<long long>(o.batch), o.precision.c_str());
  nlohmann::json rows = nlohmann::json::array();
  std::ostringstream stages;
  for (std::size_t i = 0; i < o.stages.size(); ++i) stages << (i ? "," : "") << o.stages[i];
  for (const int ranks : o.ranks) {
    if (!loom::comm::mpi_built() && ranks > 1) continue;
    const int threads = std::max(1, o.cores / ranks);
    std::printf("  %d rank(s) x %d thread(s)...\n", ranks, threads);
    std::ostringstream arguments;
    arguments << "--stages " << stages.str() << " --steps " << o.steps << " --warmup " << o.warmup << " --layers "
              << o.layers << " --channels " << o.channels << " --batch " << o.batch << " --device " << o.device
              << " --precision " << o.precision;
    for (auto& row : loom::bench::launch_self_job("zero_bench", ranks, threads, arguments.str())) rows.push_back(row);
  }
  print_table(rows);
  nlohmann::json record = loom::bench::make_record(
      "zero_bench", {{"cores", o.cores}, {"steps", o.steps}, {"warmup", o.warmup}, {"layers", o.layers},
                     {"channels", o.channels}, {"batch", o.batch}, {"device", o.device}, {"precision", o.precision},
                     {"baseline", "DDP (stage 0) at the same rank count, and the same step without communication"}});
  record["rows"] = rows;
  if (!o.json_path.empty()) loom::bench::write_json(o.json_path, record);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("zero_bench: step time, exposed communication and model state per rank for DDP, ZeRO-1 and ZeRO-2");
  Options o;
  app.add_option("--ranks", o.ranks, "rank counts to launch, e.g. 1,2,3,4")->delimiter(',');
  app.add_option("--stages", o.stages, "ZeRO stages to measure (0: DDP)")->delimiter(',')->check(CLI::Range(0, 2));
  app.add_option("--cores", o.cores, "cores to share among each job's ranks")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps (medians reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--layers", o.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--channels", o.channels, "model width")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences of 128 tokens per rank")->check(CLI::PositiveNumber);
  app.add_option("--device", o.device, "cpu or cuda");
  app.add_option("--precision", o.precision)->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--json", o.json_path, "write the JSON record here");
  app.add_flag("--worker", o.worker, "measure this job only (what the launched jobs run)");
  app.add_option("--worker-json", o.worker_json, "where a worker writes its rows");
  try {
    const loom::InitOptions init = loom::parse_init_flags(argc, argv);
    CLI11_PARSE(app, argc, argv);
    const bool launched = loom::comm::detect_launch().launcher != "single process";
    if (o.worker || launched) return run_worker(o, init, argc, argv);
    return run_orchestrator(o);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zero_bench: %s\n", error.what());
    return 1;
  }
}
