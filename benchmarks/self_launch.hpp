// Benchmarks that measure several rank counts launch themselves: one `mpirun -np RANKS` job per
// configuration, each rank with `threads` OpenMP threads (unbound), in worker mode, and collect the
// JSON rows rank 0 writes. Without MPI in the build only one process runs (ranks must be 1).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace loom::bench {

// This executable's path (/proc/self/exe).
std::string self_path(const std::string& tool);

// Runs `<self> --worker --worker-json FILE <arguments>` as one job of `ranks` processes and returns
// the array of rows it wrote, each with threads_per_rank added. Throws naming the command if the
// job fails.
nlohmann::json launch_self_job(const std::string& tool, int ranks, int threads, const std::string& arguments);

}  // namespace loom::bench
