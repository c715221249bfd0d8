// zero_bench: what ZeRO costs and saves. For DDP, ZeRO-1, 2 and 3 (and ZeRO-3's options: values kept
// gathered from forward to backward, a bf16 reduce-scatter) at each rank count it reports
// the training step of train_bench's default GPT (AdamW), the same step without communication on
// a second model in the same job (alternating, so both see the same machine), what data
// parallelism exposed (step - compute), the time blocked waiting for reductions, and the model
// state each rank holds: measured by the CPU allocator (live bytes that building the model and the
// trainer added) against shard::model_state_bytes, the optimizer's share, the unit buffers of
// ZeRO-2/3 (gradient pool, gathered values) against their prediction, the peak of the training
// step (activations and the unit buffers included), and for ZeRO-3 the fraction of value gathers
// that were issued ahead of their unit (prefetched) and already complete when it started.
//
//   build/benchmarks/zero_bench --json zero.json           # launches mpirun -np 1..4 itself
//   mpirun -np 8 build/benchmarks/zero_bench --device cuda  # one job, as launched
//
// With --tp it measures each configuration under tensor parallelism too (issue 28): the ranks form
// a data x tensor mesh of TP ranks per tensor group (each TP that divides the rank count), the
// layers split over the tensor group and ZeRO over the data group; the global batch stays
// batch x ranks (a data rank takes batch x TP sequences), so tokens/s compare with DDP's on the
// same ranks. Its compute baseline is the whole model's step on a data rank's batch without
// communication divided by TP: what a perfect split would take.
//
// Like ddp_bench it starts one `mpirun -np N` job per rank count (threads = cores / ranks), each
// measuring every configuration. Targets: ZeRO-2's step within 1.15x DDP's at 2 ranks (issue 14);
// ZeRO-3's within 1.2x, with at least (L-1)/L of its gathers prefetched (issue 25); TP = 2 at
// least 0.7x DDP's tokens/s at 2 ranks (issue 28).
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
#include "loom/topo/mesh.hpp"
#include "loom/train/trainer.hpp"
#include "repeat_batch.hpp"
#include "self_launch.hpp"

namespace {

struct Options {
  std::vector<int> ranks{1, 2, 3, 4};
  std::vector<std::string> configs{"ddp", "zero1", "zero2", "zero3", "zero3-keep", "zero3-bf16"};
  std::vector<int> tensor{1};  // tensor-parallel degrees (each that divides a rank count is measured)
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int steps = 20, warmup = 3;
  std::int64_t layers = 4, channels = 128, batch = 8;
  std::string device = "cpu", precision = "fp32", json_path, worker_json;
  bool worker = false;
};

loom::nn::GPTConfig model_config(const Options& o) {
  return {.vocab_size = 256, .context = 128, .layers = o.layers, .heads = 4, .channels = o.channels};
}

const std::vector<std::string> known_configs{"ddp", "zero1", "zero2", "zero3", "zero3-keep", "zero3-bf16"};

// "ddp", "zero1", "zero2", "zero3"; "zero3-keep": values gathered from forward to backward;
// "zero3-bf16": the reduce-scatter in bf16.
loom::train::TrainerOptions trainer_options(const std::string& config) {
  loom::train::TrainerOptions options;
  options.schedule = {.max_lr = 1e-4f, .min_lr = 1e-5f, .warmup = 0, .total = 1000000};
  options.zero = config == "ddp" ? 0 : config[4] - '0';
  options.zero_options.keep_gathered_for_backward = config == "zero3-keep";
  if (config == "zero3-bf16") options.zero_options.reduction = loom::DType::bf16;
  return options;
}

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

nlohmann::json measure_config(const Options& o, loom::World& world, const std::string& name, int tp) {
  const int stage = trainer_options(name).zero;
  const loom::nn::GPTConfig config = model_config(o);
  const loom::model::Precision precision = loom::model::Precision::parse(o.precision);
  // The mesh first (its splits allocate a little): data x tensor, tensor innermost.
  std::unique_ptr<loom::topo::DeviceMesh> mesh;
  if (tp > 1) mesh = std::make_unique<loom::topo::DeviceMesh>(world.comm(), loom::topo::MeshOptions{.tensor = tp});
  const int data_rank = mesh ? mesh->coords().data : world.rank();
  const std::int64_t rows = o.batch * tp;  // a data rank's share of the global batch (batch x ranks)
  std::mt19937 rng(static_cast<std::uint32_t>(1 + data_rank));
  loom::bench::RepeatBatch data(loom::bench::random_batch(rows, config.context, config.vocab_size, rng),
                                config.vocab_size);
  const std::int64_t live_before = loom::cpu_memory_stats().live_bytes;
  loom::reset_cpu_memory_peak();
  loom::comm::Communicator* world_comm = world.size() > 1 || stage > 0 ? &world.comm() : nullptr;
  loom::comm::Communicator* comm = mesh ? &mesh->data() : world_comm;
  loom::comm::Communicator* tensor = mesh ? &mesh->tensor() : nullptr;
  // Built in the layout its stage trains in (what train_gpt does): no full copy on the way.
  loom::nn::GPT model(config, precision, world.device(), 1337, loom::shard::space_layout(stage, comm), tensor);
  loom::train::Trainer trainer(model, data, trainer_options(name), {world_comm, comm, tensor});
  const std::int64_t state_measured = loom::cpu_memory_stats().live_bytes - live_before;
  // The peak while the model and trainer were built (the state they keep, plus initialisation's
  // scratch of one parameter's part at a time).
  const std::int64_t construction_peak = loom::cpu_memory_stats().peak_bytes - live_before;
  loom::reset_cpu_memory_peak();
  for (int i = 0; i < o.warmup; ++i) trainer.step();
  const std::int64_t peak = loom::cpu_memory_stats().peak_bytes - live_before;

  loom::nn::GPT alone_model(config, precision, world.device());
  loom::bench::RepeatBatch alone_data(data.next(), config.vocab_size);
  loom::train::Trainer alone(alone_model, alone_data, trainer_options("ddp"));
  for (int i = 0; i < o.warmup; ++i) alone.step();
  std::vector<double> step, compute, wait;
  loom::shard::ZeroEngine* const zero = trainer.zero_engine();
  if (zero != nullptr) zero->reset_gather_report();
  for (int i = 0; i < o.steps; ++i) {
    compute.push_back(alone.step().seconds);
    step.push_back(trainer.step().seconds);
    wait.push_back(trainer.gradient_sync().stats().synchronize_seconds);
  }
  const double step_s = loom::bench::median(step), compute_s = loom::bench::median(compute);
  const loom::shard::ModelStateBytes held = trainer.held_model_state(), predicted = trainer.predicted_model_state();
  const bool cpu = world.device().is_cpu();  // the CPU allocator sees only CPU memory
  const loom::shard::GatherReport gathers = zero != nullptr ? zero->gather_report() : loom::shard::GatherReport{};
  const double gathered = static_cast<double>(std::max<std::int64_t>(1, gathers.gathers));
  // Under tensor parallelism a perfect split would take 1/TP of the whole model's step.
  const double ideal_s = compute_s / tp;
  return {{"ranks", world.size()},
          {"tensor_parallel", tp},
          {"data_parallel", world.size() / tp},
          {"config", name},
          {"stage", stage},
          {"units", model.parameter_space().units().size()},
          {"parameters", model.parameter_space().parameter_elements()},
          {"step_ms", step_s * 1e3},
          {"compute_ms", ideal_s * 1e3},
          {"exposed_comm_ms", (step_s - ideal_s) * 1e3},
          {"synchronize_wait_ms", loom::bench::median(wait) * 1e3},
          {"tokens_per_s", static_cast<double>(o.batch * config.context * world.size()) / step_s},
          {"state_bytes_measured", cpu ? state_measured : held.persistent()},
          {"state_bytes_measured_by", cpu ? "cpu allocator" : "tensor sizes"},
          {"state_bytes_predicted", predicted.persistent()},
          {"buffer_bytes_measured", held.buffers},
          {"buffer_bytes_predicted", predicted.buffers},
          {"gathers_per_step", static_cast<double>(gathers.gathers) / o.steps},
          {"prefetched_fraction", gathers.gathers > 0 ? static_cast<double>(gathers.prefetched) / gathered : 0.0},
          {"prefetch_ready_fraction", gathers.gathers > 0 ? static_cast<double>(gathers.ready) / gathered : 0.0},
          {"gathered_units_peak", gathers.peak_live},
          {"optimizer_bytes", held.optimizer()},
          {"gradient_bytes", held.gradients},
          {"gradient_pool_buffers", trainer.zero_engine() != nullptr ? trainer.zero_engine()->pool_buffers() : 0},
          {"peak_bytes", cpu ? peak : 0},
          {"construction_peak_bytes", cpu ? construction_peak : 0}};
}

int run_worker(const Options& o, loom::InitOptions init, int argc, char** argv) {
  if (!init.device_type) init.device_type = loom::Device::parse(o.device).type();
  const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
  nlohmann::json rows = nlohmann::json::array();
  for (const int tp : o.tensor) {
    if (world->size() % tp != 0) continue;
    for (const std::string& name : o.configs) {
      nlohmann::json row = measure_config(o, *world, name, tp);
      if (world->rank() == 0) rows.push_back(row);
    }
  }
  if (world->rank() == 0 && !o.worker_json.empty()) loom::bench::write_json(o.worker_json, rows);
  if (world->rank() == 0 && o.worker_json.empty()) std::printf("%s\n", rows.dump(2).c_str());
  return 0;
}

void print_table(const nlohmann::json& rows) {
  std::printf("\n%5s %3s %7s %11s %9s %10s %10s %9s %8s %10s %10s %10s %10s %9s %9s %10s %8s %9s\n", "ranks", "tp",
              "threads", "config", "step ms", "compute ms", "exposed ms", "sync wait", "vs DDP", "state MiB", "predicted",
              "buffers", "predicted", "optim MiB", "peak MiB", "build peak", "prefetch", "tok/s");
  for (const auto& r : rows) {
    double ddp_step = 0;  // DDP without tensor parallelism on the same ranks: the baseline
    for (const auto& d : rows) {
      if (d["ranks"] == r["ranks"] && d["config"] == "ddp" && d.value("tensor_parallel", 1) == 1) {
        ddp_step = d["step_ms"].get<double>();
      }
    }
    char versus[32] = "-";
    if (ddp_step > 0) std::snprintf(versus, sizeof(versus), "%.2fx", r["step_ms"].get<double>() / ddp_step);
    char prefetch[32] = "-";
    if (r["gathers_per_step"].get<double>() > 0) {
      std::snprintf(prefetch, sizeof(prefetch), "%.2f", r["prefetched_fraction"].get<double>());
    }
    std::printf("%5d %3d %7d %11s %9.2f %10.2f %10.3f %9.3f %8s %10.3f %10.3f %10.3f %10.3f %9.3f %9.2f %10.2f %8s %9.0f\n",
                r["ranks"].get<int>(), r.value("tensor_parallel", 1), r["threads_per_rank"].get<int>(), r["config"].get<std::string>().c_str(),
                r["step_ms"].get<double>(), r["compute_ms"].get<double>(), r["exposed_comm_ms"].get<double>(),
                r["synchronize_wait_ms"].get<double>(), versus, mib(r["state_bytes_measured"].get<std::int64_t>()),
                mib(r["state_bytes_predicted"].get<std::int64_t>()), mib(r["buffer_bytes_measured"].get<std::int64_t>()),
                mib(r["buffer_bytes_predicted"].get<std::int64_t>()), mib(r["optimizer_bytes"].get<std::int64_t>()),
                mib(r["peak_bytes"].get<std::int64_t>()), mib(r["construction_peak_bytes"].get<std::int64_t>()), prefetch,
                r["tokens_per_s"].get<double>());
  }
}

int run_orchestrator(const Options& o) {
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("zero_bench: %d cores; each rank count is one job (mpirun -np RANKS, OMP_NUM_THREADS = cores / ranks); "
              "GPT %lld layers x %lld, batch %lld x 128 per rank, AdamW, %s\n",
              o.cores, static_cast<long long>(o.layers), static_cast<long long>(o.channels),
              static_cast<long long>(o.batch), o.precision.c_str());
  nlohmann::json rows = nlohmann::json::array();
  std::ostringstream configs;
  for (std::size_t i = 0; i < o.configs.size(); ++i) configs << (i ? "," : "") << o.configs[i];
  std::ostringstream tensor;
  for (std::size_t i = 0; i < o.tensor.size(); ++i) tensor << (i ? "," : "") << o.tensor[i];
  for (const int ranks : o.ranks) {
    if (!loom::comm::mpi_built() && ranks > 1) continue;
    const int threads = std::max(1, o.cores / ranks);
    std::printf("  %d rank(s) x %d thread(s)...\n", ranks, threads);
    std::ostringstream arguments;
    arguments << "--configs " << configs.str() << " --tp " << tensor.str() << " --steps " << o.steps << " --warmup " << o.warmup << " --layers "
              << o.layers << " --channels " << o.channels << " --batch " << o.batch << " --device " << o.device
              << " --precision " << o.precision;
    for (auto& row : loom::bench::launch_self_job("zero_bench", ranks, threads, arguments.str())) rows.push_back(row);
  }
  print_table(rows);
  nlohmann::json record = loom::bench::make_record(
      "zero_bench", {{"cores", o.cores}, {"steps", o.steps}, {"warmup", o.warmup}, {"layers", o.layers},
                     {"channels", o.channels}, {"batch", o.batch}, {"device", o.device}, {"precision", o.precision},
                     {"tensor_parallel", o.tensor},
                     {"baseline", "DDP (stage 0, TP 1) at the same rank count, and the same step without communication "
                                  "(under TP: the whole model's step on a data rank's batch, divided by TP)"},
                     {"state_bytes_measured", "live CPU bytes that building the model and trainer added (before any step)"},
                     {"buffer_bytes_measured", "ZeRO's unit buffers after the timed steps (gradient pool + gathered values)"}});
  record["rows"] = rows;
  if (!o.json_path.empty()) loom::bench::write_json(o.json_path, record);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("zero_bench: step time, exposed communication and model state per rank for DDP and ZeRO-1, 2, 3");
  Options o;
  app.add_option("--ranks", o.ranks, "rank counts to launch, e.g. 1,2,3,4")->delimiter(',');
  app.add_option("--configs", o.configs, "what to measure: ddp, zero1, zero2, zero3, zero3-keep, zero3-bf16")
      ->delimiter(',')
      ->check(CLI::IsMember(known_configs));
  app.add_option("--tp", o.tensor, "tensor-parallel degrees, e.g. 1,2,4 (those dividing a rank count run)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
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
  return loom::bench::self_launching_main(
      "zero_bench", app, argc, argv, o.worker,
      [&](const loom::InitOptions& init, int n, char** args) { return run_worker(o, init, n, args); },
      [&] { return run_orchestrator(o); });
}
