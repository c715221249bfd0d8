// ddp_bench: data-parallel training throughput with loom's GradientReducer. For each rank count it
// reports the step time split into computation (the same step without communication, measured in
// the same job) and what data parallelism exposed (step - computation; also the time blocked in
// synchronize()), the communication alone, the fraction of it hidden behind backward
// (1 - exposed / alone, within [0, 1]; "n/m", not meaningful, with the reason below the table
// when ranks x threads exceed the cores or the step lost more than the communication takes), the job's tokens/s against 1 rank on all cores, and, on a model of 196
// small parameters, bucketed against one all-reduce per parameter. On a CPU each rank's MPI
// progress thread shares the cores with the OpenMP threads; that contention is part of the step.
//
//   build/benchmarks/ddp_bench --json ddp.json          # launches mpirun -np 1..4 itself, then Gloo jobs
//   mpirun -np 8 build/benchmarks/ddp_bench --device cuda --json ddp.json   # one job, as launched
//
// Run without a launcher, it starts one `mpirun -np N` job per configuration (ranks x OpenMP
// threads, threads = cores / ranks, at least 1; --bind-to none) of itself in worker mode and
// collects their JSON; with --backends gloo (the default has both), the same configurations again
// as torchrun starts them, on Gloo. Run under a launcher, it measures that job only. On the CPU, each rank count
// of the first workload is also run by PyTorch (DistributedDataParallel over gloo, the same ranks,
// threads, model and batch; benchmarks/peers/torch_gpt.py, when python3-torch is installed; --peer).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.hpp"
#include "ddp_worker.hpp"
#include "self_launch.hpp"
#include "torch_peer.hpp"
#include "loom/comm/gloo.hpp"
#include "loom/comm/launch.hpp"
#include "loom/comm/mpi.hpp"
#include "loom/core/build_info.hpp"
#include "loom/core/error.hpp"

namespace {

struct Options {
  std::vector<std::string> workloads{"default", "small-params"};
  std::vector<int> ranks{1, 2, 3, 4};
  std::vector<std::string> backends{"mpi", "gloo"};  // those built; 1 rank runs once, in-process
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int steps = 20, warmup = 3;
  double bucket_mb = 25;
  std::string device = "cpu", precision = "fp32", json_path, worker_json, peer = "auto";
  bool worker = false;
};

loom::bench::DdpWorkload workload_for(const Options& o, const std::string& name) {
  loom::bench::DdpWorkload w = loom::bench::named_workload(name);
  w.steps = o.steps;
  w.warmup = o.warmup;
  w.bucket_mb = o.bucket_mb;
  w.precision = o.precision;
  return w;
}

int run_worker(const Options& o, loom::InitOptions init, int argc, char** argv) {
  if (!init.device_type) init.device_type = loom::Device::parse(o.device).type();
  const std::unique_ptr<loom::World> world = loom::init(argc, argv, init);
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& name : o.workloads) {
    nlohmann::json row = loom::bench::measure_ddp(workload_for(o, name), *world);
    if (world->rank() == 0) {
      row["workload"] = name;
      rows.push_back(row);
    }
  }
  if (world->rank() == 0 && !o.worker_json.empty()) loom::bench::write_json(o.worker_json, rows);
  if (world->rank() == 0 && o.worker_json.empty()) std::printf("%s\n", rows.dump(2).c_str());
  return 0;
}

// One job of `ranks` processes x `threads` OpenMP threads on `backend` (MPI: started by mpirun;
// Gloo: started as torchrun starts it); returns its rows.
nlohmann::json launch_job(const Options& o, const std::string& workload, int ranks, int threads,
                          const std::string& backend) {
  std::ostringstream arguments;
  arguments << "--workloads " << workload << " --steps " << o.steps << " --warmup " << o.warmup << " --bucket-mb "
            << o.bucket_mb << " --device " << o.device << " --precision " << o.precision;
  nlohmann::json rows = loom::bench::launch_self_job("ddp_bench", ranks, threads, arguments.str(),
                                                     backend == "gloo" ? "torchrun" : "mpirun");
  for (auto& row : rows) {
    row["backend"] = ranks == 1 ? "in-process" : backend;
    std::string why;
    const std::optional<double> hidden = loom::bench::hidden_fraction(
        row["exposed_comm_ms"].get<double>(), row["comm_only_ms"].get<double>(), ranks, ranks * threads > o.cores, why);
    row["hidden_fraction"] = hidden ? nlohmann::json(*hidden) : nlohmann::json(nullptr);
    if (!hidden) row["hidden_not_measured"] = why;
  }
  return rows;
}

// PyTorch's tokens/s for this job's configuration, into the row (torch_tokens_per_s, vs_torch).
void add_torch_peer(const Options& o, const std::string& workload, nlohmann::json& row, std::string& why_not) {
  loom::bench::TorchPeerRequest request;
  const loom::bench::DdpWorkload w = workload_for(o, workload);
  request.model = w.model;
  request.batch = w.batch;
  request.steps = o.steps;
  request.warmup = o.warmup;
  request.ranks = row["ranks"].get<int>();
  request.threads = row["threads_per_rank"].get<int>();
  const std::optional<nlohmann::json> peer = loom::bench::run_torch_peer(request, why_not);
  if (!peer) return;
  row["torch"] = (*peer)["torch"];
  row["torch_tokens_per_s"] = (*peer)["tokens_per_s"];
  row["vs_torch"] = row["tokens_per_s"].get<double>() / (*peer)["tokens_per_s"].get<double>();
}

void print_table(const nlohmann::json& rows, double baseline_tokens_per_s) {
  std::printf("\n%-13s %-10s %5s %7s %9s %10s %10s %9s %10s %7s %10s %9s %11s %8s\n", "workload", "backend", "ranks", "threads",
              "step ms", "compute ms", "exposed ms", "sync wait", "comm ms", "hidden", "tok/s", "vs 1 rank",
              "torch tok/s", "vs torch");
  for (const auto& r : rows) {
    const bool against_baseline = r["workload"] == rows.front()["workload"] && baseline_tokens_per_s > 0;
    const std::string versus =
        against_baseline ? std::to_string(static_cast<int>(100 * r["tokens_per_s"].get<double>() / baseline_tokens_per_s + 0.5)) + "%" : "-";
    char torch[32] = "-", versus_torch[32] = "-", hidden[16] = "n/m";
    if (!r["hidden_fraction"].is_null()) std::snprintf(hidden, sizeof(hidden), "%.0f%%", 100 * r["hidden_fraction"].get<double>());
    if (r.contains("torch_tokens_per_s")) {
      std::snprintf(torch, sizeof(torch), "%.0f", r["torch_tokens_per_s"].get<double>());
      std::snprintf(versus_torch, sizeof(versus_torch), "%.2fx", r["vs_torch"].get<double>());
    }
    std::printf("%-13s %-10s %5d %7d %9.2f %10.2f %10.3f %9.3f %10.3f %7s %10.0f %9s %11s %8s\n",
                r["workload"].get<std::string>().c_str(), r.value("backend", std::string("-")).c_str(), r["ranks"].get<int>(), r["threads_per_rank"].get<int>(),
                r["step_ms"].get<double>(), r["compute_ms"].get<double>(), r["exposed_comm_ms"].get<double>(),
                r["synchronize_wait_ms"].get<double>(), r["comm_only_ms"].get<double>(), hidden,
                r["tokens_per_s"].get<double>(), versus.c_str(), torch, versus_torch);
  }
  for (const auto& r : rows) {  // n/m: not meaningful, and why
    if (r.contains("hidden_not_measured"))
      std::printf("  hidden n/m for %s at %d rank(s) on %s: %s\n", r["workload"].get<std::string>().c_str(),
                  r["ranks"].get<int>(), r.value("backend", std::string("-")).c_str(),
                  r["hidden_not_measured"].get<std::string>().c_str());
  }
  std::printf("\n%-13s %-10s %5s %14s %14s %9s %14s %14s\n", "workload", "backend", "ranks", "bucketed comm", "per-tensor comm",
              "speedup", "bucketed step", "per-tensor step");
  for (const auto& r : rows) {
    if (!r.contains("per_tensor_comm_only_ms")) continue;
    std::printf("%-13s %-10s %5d %11.3f ms %11.3f ms %8.1fx %11.2f ms %12.2f ms\n", r["workload"].get<std::string>().c_str(),
                r.value("backend", std::string("-")).c_str(), r["ranks"].get<int>(), r["comm_only_ms"].get<double>(), r["per_tensor_comm_only_ms"].get<double>(),
                r["per_tensor_comm_only_ms"].get<double>() / r["comm_only_ms"].get<double>(), r["step_ms"].get<double>(),
                r["per_tensor_step_ms"].get<double>());
  }
}

int run_orchestrator(const Options& o) {
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("ddp_bench: %d cores; each configuration is one job (mpirun -np RANKS, OMP_NUM_THREADS = cores / ranks)\n",
              o.cores);
  nlohmann::json rows = nlohmann::json::array();
  const bool want_peer = o.peer == "torch" || (o.peer == "auto" && o.device == "cpu");
  loom::require(!(o.peer == "torch" && o.device != "cpu"), "ddp_bench: the PyTorch peer runs on the CPU only");
  std::string peer_absent;
  for (const std::string& workload : o.workloads) {
    for (int ranks : o.ranks) {
      if (workload == "small-params" && ranks == 1) continue;  // nothing to compare per tensor at 1 rank
      const int threads = std::max(1, o.cores / ranks);
      bool peer_done = false;  // PyTorch once per rank count
      for (const std::string& backend : o.backends) {
        const bool built = backend == "gloo" ? loom::comm::gloo_built() : loom::comm::mpi_built();
        if (ranks > 1 && !built) {
          std::printf("  %s: %d rank(s) on %s: not measured (this loom was built without it)\n", workload.c_str(),
                      ranks, backend.c_str());
          continue;
        }
        if (ranks == 1 && backend != o.backends.front()) continue;  // one process: no backend to compare
        std::printf("  %s: %d rank(s) x %d thread(s) on %s...\n", workload.c_str(), ranks, threads,
                    ranks == 1 ? "one process" : backend.c_str());
        for (auto& row : launch_job(o, workload, ranks, threads, backend)) {
          if (want_peer && peer_absent.empty() && workload == o.workloads.front() && !peer_done) {
            std::printf("  %s: PyTorch, %d rank(s) x %d thread(s)...\n", workload.c_str(), ranks, threads);
            add_torch_peer(o, workload, row, peer_absent);
            peer_done = true;
          }
          rows.push_back(row);
        }
      }
    }
  }
  loom::require(o.peer != "torch" || peer_absent.empty(), "ddp_bench: --peer torch: ", peer_absent);
  if (want_peer && !peer_absent.empty()) std::printf("  PyTorch peer: none (%s)\n", peer_absent.c_str());
  double baseline = 0;  // the default workload at 1 rank on every core
  for (const auto& r : rows) {
    if (r["workload"] == o.workloads.front() && r["ranks"] == 1) baseline = r["tokens_per_s"].get<double>();
  }
  print_table(rows, baseline);
  nlohmann::json record = loom::bench::make_record(
      "ddp_bench", {{"cores", o.cores}, {"steps", o.steps}, {"warmup", o.warmup}, {"bucket_mb", o.bucket_mb},
                    {"device", o.device}, {"precision", o.precision}, {"peer", o.peer},
                    {"baseline", "the first workload at 1 rank x all cores, tokens/s"}});
  record["rows"] = rows;
  if (!o.json_path.empty()) loom::bench::write_json(o.json_path, record);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ddp_bench: data-parallel step time, hidden communication and scaling with loom's GradientReducer");
  Options o;
  app.add_option("--workloads", o.workloads, "default (train_bench's GPT), small-params (196 tensors), gpt2-124m")
      ->delimiter(',');
  app.add_option("--ranks", o.ranks, "rank counts to launch, e.g. 1,2,3,4")->delimiter(',');
  app.add_option("--backends", o.backends, "CPU backends to run each rank count on: mpi (mpirun), gloo (started as "
                 "torchrun starts it), or both, in the same run")->delimiter(',')->check(CLI::IsMember({"mpi", "gloo"}));
  app.add_option("--cores", o.cores, "cores to share among each job's ranks")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps (medians reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket size")->check(CLI::PositiveNumber);
  app.add_option("--device", o.device, "cpu or cuda");
  app.add_option("--precision", o.precision)->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--json", o.json_path, "write the JSON record here");
  app.add_option("--peer", o.peer, "PyTorch DDP on the first workload in the same run: auto (on the CPU when "
                 "python3-torch is installed), torch (required) or none")->check(CLI::IsMember({"auto", "torch", "none"}));
  app.add_flag("--worker", o.worker, "measure this job only (what the launched jobs run)");
  app.add_option("--worker-json", o.worker_json, "where a worker writes its rows");
  try {
    const loom::InitOptions init = loom::parse_init_flags(argc, argv);  // --loom-* flags
    CLI11_PARSE(app, argc, argv);
    const bool launched = loom::comm::detect_launch().launcher != "single process";
    if (o.worker || launched) return run_worker(o, init, argc, argv);
    return run_orchestrator(o);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ddp_bench: %s\n", error.what());
    return 1;
  }
}
