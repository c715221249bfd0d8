#include "loom/comm/launch.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "loom/core/error.hpp"

namespace loom::comm {

namespace {

struct Source {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
};

// Open MPI, MPICH/Hydra PMI, SLURM, torchrun: the order in which they are trusted (SLURM's
// variables are skipped in torchrun's workers, which inherit them).
constexpr Source sources[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

// The variable's value as a non-negative int, or nothing when it is unset.
std::optional<int> read_int(const Environment& env, const char* name) {
  const char* text = env(name);
  if (text == nullptr) return std::nullopt;
  int value = -1;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, value);
  require(*text != '\0' && ec == std::errc() && ptr == end && value >= 0, "launch: ", name, "='", text,
          "' is not a non-negative integer");
  return value;
}

}  // namespace

Environment process_environment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

LaunchInfo detect_launch(const LaunchOverrides& overrides, const Environment& env) {
  LaunchInfo info;
  // torchrun's workers inherit the SLURM_* variables of the allocation (srun torchrun, sbatch +
  // torchrun) but describe the job themselves: TORCHELASTIC_RUN_ID marks them.
  const bool under_torchrun = env("TORCHELASTIC_RUN_ID") != nullptr && env("RANK") != nullptr;
  for (const Source& source : sources) {
    if (under_torchrun && std::strcmp(source.launcher, "SLURM") == 0) continue;
    const std::optional<int> rank = read_int(env, source.rank);
    if (!rank) continue;
    const std::optional<int> size = read_int(env, source.size);
    require(size.has_value(), "launch: ", source.launcher, " set ", source.rank, " but not ", source.size);
    info.launcher = source.launcher;
    info.rank = *rank;
    info.size = *size;
    info.local_rank = read_int(env, source.local_rank).value_or(0);
    if (std::strcmp(source.launcher, "torchrun") == 0 && info.size > 1) {
      const char* addr = env("MASTER_ADDR");
      require(addr != nullptr && *addr != '\0', "launch: torchrun job of ", info.size,
              " processes without MASTER_ADDR (the rendezvous host)");
      const std::optional<int> port = read_int(env, "MASTER_PORT");
      require(port.has_value() && *port >= 1 && *port <= 65535, "launch: torchrun job needs MASTER_PORT in 1..65535");
      info.master_addr = addr;
      info.master_port = *port;
    }
    break;
  }
  if (overrides.rank || overrides.size || overrides.local_rank) info.launcher = "override";
  if (overrides.rank) info.rank = *overrides.rank;
  if (overrides.size) info.size = *overrides.size;
  if (overrides.local_rank) info.local_rank = *overrides.local_rank;
  require(info.size >= 1, "launch (", info.launcher, "): world size must be >= 1, got ", info.size);
  require(info.rank >= 0 && info.rank < info.size, "launch (", info.launcher, "): rank ", info.rank,
          " is outside a world of ", info.size);
  require(info.local_rank >= 0 && info.local_rank < info.size, "launch (", info.launcher, "): local rank ",
          info.local_rank, " is outside a world of ", info.size);
  return info;
}

Device device_for(const LaunchInfo& launch, int gpu_count, bool allow_sharing) {
  if (gpu_count <= 0) return Device::cpu();
  require(launch.local_rank < gpu_count || allow_sharing, "launch: local rank ", launch.local_rank,
          " has no GPU of its own (", gpu_count, " GPU", gpu_count == 1 ? "" : "s",
          " on this node); start fewer processes per node or allow GPU sharing");
  return Device::cuda(launch.local_rank % gpu_count);
}

}  // namespace loom::comm
