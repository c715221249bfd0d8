// Where this process sits in a job, from the launcher's environment: the first step of
// bootstrapping (the world communicator is built from it). Sources, in this order: explicit
// overrides (command-line flags), Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), PMI as set by
// MPICH/Hydra (PMI_RANK/PMI_SIZE, MPI_LOCALRANKID), SLURM (SLURM_PROCID/NTASKS/LOCALID),
// torchrun (RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT); with none, one process.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "loom/core/device.hpp"

namespace loom::comm {

struct LaunchInfo {
  std::string launcher = "single process";  // "override", "Open MPI", "PMI", "SLURM", "torchrun"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::string master_addr;  // torchrun's rendezvous host (empty for the other launchers)
  int master_port = 0;
};

struct LaunchOverrides {
  std::optional<int> rank{}, size{}, local_rank{};
};

// Looks a variable up; returns nullptr when it is unset. The default reads the process environment.
using Environment = std::function<const char*(const char* name)>;
Environment process_environment();

// Throws an invalid_argument Error naming the variable for a malformed value (not a
// non-negative integer, a port outside 1..65535), a rank outside [0, size), a launcher that sets
// a rank without a size, and a multi-process torchrun job without MASTER_ADDR or MASTER_PORT.
LaunchInfo detect_launch(const LaunchOverrides& overrides = {}, const Environment& env = process_environment());

// The device of this process: cuda:<local_rank> when there are GPUs, the CPU when there are none.
// More local ranks than GPUs is an error unless allow_sharing (then ranks share GPUs round-robin).
Device device_for(const LaunchInfo& launch, int gpu_count, bool allow_sharing = false);

}  // namespace loom::comm
