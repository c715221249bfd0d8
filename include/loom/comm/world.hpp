// Bootstrap: loom::init(argc, argv) finds where this process sits in the job (comm/launch.hpp),
// picks its device (the GPU of its local rank, or the CPU), and builds the world communicator for
// that device: NCCL on GPUs (the NCCL id shared through MPI, or TCP at MASTER_ADDR:MASTER_PORT, or
// the file named by LOOM_RENDEZVOUS_FILE), MPI between CPU processes an MPI launcher started (mpirun,
// srun with PMIx/PMI), Gloo between CPU processes something else started (torchrun, a PyTorchJob's
// environment, srun without MPI support: they meet over TCP at MASTER_ADDR:MASTER_PORT + 1, or
// through LOOM_RENDEZVOUS_FILE), in-process for a single CPU process. LOOM_CPU_BACKEND=mpi|gloo
// overrides the choice for CPU processes; World::backend_choice says what was chosen and why.
// loom's own flags are taken out of argv (as MPI_Init does with its own):
//   --loom-rank N --loom-world-size N --loom-local-rank N   override the launcher
//   --loom-device cpu|cuda       the device type (default: cuda when there are GPUs)
//   --loom-backend auto|nccl|mpi|gloo|in-process
//   --loom-allow-gpu-sharing     more local ranks than GPUs share them round-robin
//   --loom-timeout-ms N          CommOptions::timeout
// A misconfiguration (rank out of range, more local ranks than GPUs, a torchrun job without
// MASTER_ADDR, a backend this build or device cannot use) is a clear invalid_argument Error.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "loom/comm/communicator.hpp"
#include "loom/comm/launch.hpp"

namespace loom {

struct InitOptions {
  comm::CommOptions comm{};
  std::string backend = "auto";             // auto, nccl, mpi, gloo or in-process
  std::optional<DeviceType> device_type{};  // unset: cuda when GPUs are visible, else cpu
  bool allow_gpu_sharing = false;
  comm::LaunchOverrides overrides{};
};

// The job as this process sees it. Destroying it closes the communicator and, when init
// initialized MPI, finalizes MPI (or skips that when a timed-out call is stuck inside MPI, or an MPI
// communicator was aborted: a peer may be gone, and MPI_Finalize would wait for it).
class World {
 public:
  World(comm::LaunchInfo launch, Device device, std::unique_ptr<comm::Communicator> comm, bool owns_mpi,
        std::string backend_choice = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  const comm::LaunchInfo& launch() const noexcept { return launch_; }
  Device device() const noexcept { return device_; }
  comm::Communicator& comm() const noexcept { return *comm_; }
  int rank() const noexcept { return launch_.rank; }
  int size() const noexcept { return launch_.size; }
  // The backend and why it was chosen ("gloo: started by torchrun's environment, no MPI launcher").
  const std::string& backend_choice() const noexcept { return backend_choice_; }

 private:
  comm::LaunchInfo launch_;
  Device device_;
  std::unique_ptr<comm::Communicator> comm_;
  bool owns_mpi_;
  std::string backend_choice_;
};

// Removes loom's flags from argv (updating argc) and applies them over `options`.
InitOptions parse_init_flags(int& argc, char** argv, InitOptions options = {});

// parse_init_flags, then bootstrap. Call once per process, before other MPI or NCCL use.
std::unique_ptr<World> init(int& argc, char**& argv, const InitOptions& options = {});

}  // namespace loom
