// Benchmarks that measure several rank counts launch themselves: one `mpirun -np RANKS` job per
// configuration, each rank with `threads` OpenMP threads (unbound), in worker mode, and collect the
// JSON rows rank 0 writes. Without MPI in the build only one process runs (ranks must be 1).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "loom/comm/world.hpp"

namespace loom::bench {

// This executable's path (/proc/self/exe).
std::string self_path(const std::string& tool);

// Runs `<self> --worker --worker-json FILE <arguments>` as one job of `ranks` processes and returns
// the array of rows it wrote, each with threads_per_rank added. Throws naming the command if the
// job fails. launcher "mpirun" starts the job with mpirun (loom then runs on MPI); "torchrun"
// starts the processes itself with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR on a free
// local port, ...), so that loom runs on Gloo.
nlohmann::json launch_self_job(const std::string& tool, int ranks, int threads, const std::string& arguments,
                               const std::string& launcher = "mpirun");

// The main() of such a benchmark: loom's flags taken out of argv, the tool's flags parsed by app,
// then run_worker (launched by mpirun, or --worker: `worker` is that flag's variable) or
// run_orchestrator. Returns the exit code; an exception is printed as "tool: what" (exit 1).
int self_launching_main(const std::string& tool, CLI::App& app, int argc, char** argv, const bool& worker,
                        const std::function<int(const InitOptions&, int, char**)>& run_worker,
                        const std::function<int()>& run_orchestrator);

}  // namespace loom::bench
