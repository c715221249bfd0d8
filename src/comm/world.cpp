#include "loom/comm/world.hpp"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <string_view>

#include "loom/comm/gloo.hpp"
#include "loom/comm/in_process.hpp"
#include "loom/comm/mpi.hpp"
#include "loom/comm/nccl.hpp"
#include "loom/comm/rendezvous.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"

namespace loom {

namespace {

int parse_count(std::string_view flag, std::string_view text) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  require(ec == std::errc() && end == text.data() + text.size() && value >= 0, "init: ", flag,
          " needs a non-negative integer, got '", text, "'");
  return value;
}

// LOOM_JOB_TOKEN (or LOOM_KEY_FILE) authenticates the TCP rendezvous; without one, anyone who
// reaches the port could take a rank's place, which rank 0 says at start.
std::optional<comm::RendezvousSecret> job_secret(int port, int rank) {
  std::optional<comm::RendezvousSecret> secret = comm::RendezvousSecret::from_environment();
  if (!secret && rank == 0) {
    std::fprintf(stderr, "loom: the TCP rendezvous on port %d is unauthenticated: set LOOM_JOB_TOKEN (16+ random "
                         "characters) on every rank to admit only this job's ranks (SECURITY.md)\n", port);
  }
  return secret;
}

bool set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// An MPI launcher started the processes, so MPI knows the job: mpirun, a PMI launcher, or srun
// with MPI support (PMIx/PMI variables; srun without them starts processes MPI sees as singletons).
bool launched_by_mpi(const comm::LaunchInfo& launch) {
  return launch.launcher == "Open MPI" || launch.launcher == "PMI" ||
         (launch.launcher == "SLURM" && (set("PMIX_RANK") || set("PMI_RANK")));
}

// Rank 0's TCP rendezvous: MASTER_ADDR and the port after MASTER_PORT (torchrun's own store holds
// MASTER_PORT; srun jobs set both, as PyTorch's need), or LOOM_RENDEZVOUS_PORT. Empty host: none.
struct RendezvousAddress {
  std::string host;
  int port = 0;
};

RendezvousAddress rendezvous_address(const comm::LaunchInfo& launch) {
  RendezvousAddress out{launch.master_addr, launch.master_port};
  if (out.host.empty() && set("MASTER_ADDR") && set("MASTER_PORT")) {
    out.host = std::getenv("MASTER_ADDR");
    out.port = parse_count("MASTER_PORT", std::getenv("MASTER_PORT"));
  }
  if (out.host.empty()) return out;
  out.port += 1;
  if (const char* text = std::getenv("LOOM_RENDEZVOUS_PORT"); text != nullptr) out.port = parse_count("LOOM_RENDEZVOUS_PORT", text);
  require(out.port >= 1 && out.port <= 65535, "init: the rendezvous port ", out.port, " is outside 1..65535 "
          "(MASTER_PORT + 1, or LOOM_RENDEZVOUS_PORT)");
  return out;
}

// Rank 0's NCCL id on every rank: through MPI when it is running, else the file
// LOOM_RENDEZVOUS_FILE, else TCP at rendezvous_address.
comm::NcclId share_nccl_id(const comm::LaunchInfo& launch, bool mpi_running, std::chrono::milliseconds timeout) {
  comm::NcclId id{};
  if (launch.rank == 0) id = comm::make_nccl_id();
  if (launch.size == 1) return id;
  if (mpi_running) {
    comm::mpi_broadcast_bytes(id, 0);
    return id;
  }
  const std::span<const unsigned char> mine(id.data(), launch.rank == 0 ? id.size() : 0);
  std::vector<unsigned char> shared;
  if (const char* path = std::getenv("LOOM_RENDEZVOUS_FILE"); path != nullptr && *path != '\0') {
    shared = comm::file_share_blob(path, launch.rank, launch.size, mine, timeout);
  } else if (const RendezvousAddress at = rendezvous_address(launch); !at.host.empty()) {
    const std::optional<comm::RendezvousSecret> secret = job_secret(at.port, launch.rank);
    comm::RendezvousOptions options;
    options.secret = secret ? &*secret : nullptr;
    shared = comm::tcp_share_blob(at.host, at.port, launch.rank, launch.size, mine, timeout, options);
  } else {
    fail(ErrorCategory::invalid_argument, "init: ", launch.size, " GPU processes (", launch.launcher,
         ") need a way to share the NCCL id: launch with mpirun (loom built with MPI), with torchrun, set "
         "MASTER_ADDR and MASTER_PORT on every rank, or set LOOM_RENDEZVOUS_FILE to a fresh path on a file system all ranks share");
  }
  require(shared.size() == id.size(), "init: the rendezvous delivered ", shared.size(), " bytes, not an NCCL id");
  std::memcpy(id.data(), shared.data(), id.size());
  return id;
}

struct BackendChoice {
  std::string backend, reason;
};

// The backend between CPU processes: MPI when an MPI launcher started them (MPI then knows the
// job), Gloo otherwise; LOOM_CPU_BACKEND overrides.
BackendChoice choose_cpu_backend(const comm::LaunchInfo& launch) {
  if (const char* forced = std::getenv("LOOM_CPU_BACKEND"); forced != nullptr && *forced != '\0') {
    const std::string_view value = forced;
    require(value == "mpi" || value == "gloo", "init: LOOM_CPU_BACKEND='", value, "' is not mpi or gloo");
    return {std::string(value), loom::detail::concat("LOOM_CPU_BACKEND=", value)};
  }
  if (launched_by_mpi(launch)) return {"mpi", loom::detail::concat("started by ", launch.launcher == "SLURM" ? "srun with MPI support (PMIx/PMI)" : launch.launcher)};
  const std::string started_by = launch.launcher == "SLURM" ? "srun without MPI support (no PMIx/PMI)"
                                 : launch.launcher == "torchrun" ? std::string("torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR)")
                                                                  : launch.launcher;
  return {"gloo", loom::detail::concat("started by ", started_by, ", no MPI launcher")};
}

// Every rank's blob through the rendezvous the environment names: LOOM_RENDEZVOUS_FILE, else TCP
// next to MASTER_ADDR:MASTER_PORT (the port after it, as for NCCL's id).
comm::BlobExchange gloo_exchange(const comm::LaunchInfo& launch, std::chrono::milliseconds timeout, bool& local) {
  if (launch.size == 1) {  // --loom-backend gloo in one process: nothing to meet
    local = true;
    return [](std::span<const unsigned char> mine) { return std::vector<std::vector<unsigned char>>{{mine.begin(), mine.end()}}; };
  }
  if (const char* path = std::getenv("LOOM_RENDEZVOUS_FILE"); path != nullptr && *path != '\0') {
    local = set("LOCAL_WORLD_SIZE") && std::string_view(std::getenv("LOCAL_WORLD_SIZE")) == std::to_string(launch.size);
    return [path = std::string(path), launch, timeout](std::span<const unsigned char> mine) {
      return comm::file_all_gather_blobs(path, launch.rank, launch.size, mine, timeout);
    };
  }
  const auto [host, port] = rendezvous_address(launch);
  require(!host.empty(), "init: ", launch.size, " CPU processes (", launch.launcher, ") on Gloo need a rendezvous: "
          "set MASTER_ADDR and MASTER_PORT on every rank (rank 0's host and a free port), or LOOM_RENDEZVOUS_FILE to "
          "a fresh path on a file system all ranks share; or launch with mpirun");
  local = host == "127.0.0.1" || host == "localhost" || host == "::1";
  return [host, port, launch, timeout](std::span<const unsigned char> mine) {
    const std::optional<comm::RendezvousSecret> secret = job_secret(port, launch.rank);
    comm::RendezvousOptions options;
    options.secret = secret ? &*secret : nullptr;
    try {
      return comm::tcp_all_gather_blobs(host, port, launch.rank, launch.size, mine, timeout, options);
    } catch (const Error& e) {
      if (e.category() != ErrorCategory::timeout) throw;
      throw Error(ErrorCategory::timeout, loom::detail::concat(
          "init: ", e.detail(), " (every rank must reach rank 0 at MASTER_ADDR:MASTER_PORT+1 = ", host, ":", port,
          ", and every rank must be started with the same WORLD_SIZE, ", launch.size, "; set LOOM_RENDEZVOUS_PORT if "
          "that port is taken, or --loom-timeout-ms to wait longer)"), launch.rank);
    }
  };
}

std::unique_ptr<comm::Communicator> world_communicator(const std::string& backend, const comm::LaunchInfo& launch,
                                                       Device device, bool mpi_running, const comm::CommOptions& options) {
  if (backend == "gloo") {
    bool local = false;
    const comm::BlobExchange exchange = gloo_exchange(launch, options.timeout, local);
    return comm::make_gloo_communicator(launch.rank, launch.size, exchange, comm::gloo_options_from_environment(local),
                                        options);
  }
  if (backend == "in-process") return std::move(comm::make_in_process_communicators(1, options).front());
  if (backend == "mpi") return comm::make_mpi_world_communicator(options);
  return comm::make_nccl_communicator(share_nccl_id(launch, mpi_running, options.timeout), launch.rank, launch.size,
                                      device, options);
}

}  // namespace

World::World(comm::LaunchInfo launch, Device device, std::unique_ptr<comm::Communicator> comm, bool owns_mpi,
             std::string backend_choice)
    : launch_(std::move(launch)), device_(device), comm_(std::move(comm)), owns_mpi_(owns_mpi),
      backend_choice_(std::move(backend_choice)) {}

World::~World() {
  // Destroyed while an exception unwinds (the World inside main's try): the peers, still in their
  // collectives, would wait out the timeout (and MPI_Finalize for them, so the error would never be
  // printed). They are told instead (they fail at once), and MPI is not finalized.
  bool told_peers = false;
  if (std::uncaught_exceptions() > 0 && comm_ && comm_->size() > 1 && (owns_mpi_ || comm_->backend() == "gloo")) {
    try {
      comm_->abort("its process is unwinding from an error (it is printed by that process)");
      told_peers = true;
    } catch (...) {
    }
  }
  comm_.reset();
  if (!owns_mpi_) return;
  if (comm::mpi_calls_were_abandoned()) {
    std::fprintf(stderr, "loom: not finalizing MPI: a timed-out call is still inside MPI\n");
    return;
  }
  if (comm::mpi_communicator_aborted() || comm::nccl_communicator_aborted()) {
    std::fprintf(stderr, "loom: not finalizing MPI: a communicator was aborted (a peer may be stopped or gone, and "
                 "MPI_Finalize would wait for it)\n");
    // The first process to exit with an error makes mpirun end the others: a moment for every rank
    // to take the abort notice and report it first. The peers of a rank that told them here may
    // themselves wait that second before they print (their World, inside main's try too, goes
    // first), so this rank waits longer than they do.
    std::this_thread::sleep_for(std::chrono::seconds(told_peers ? 2 : 1));
    return;
  }
  try {
    comm::finalize_mpi();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: %s\n", e.what());
  }
}

InitOptions parse_init_flags(int& argc, char** argv, InitOptions options) {
  int kept = argc > 0 ? 1 : 0;
  for (int i = kept; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--loom-")) {
      argv[kept++] = argv[i];
      continue;
    }
    const std::size_t equals = arg.find('=');
    const std::string_view flag = arg.substr(0, equals);
    if (flag == "--loom-allow-gpu-sharing") {
      require(equals == std::string_view::npos, "init: ", flag, " takes no value");
      options.allow_gpu_sharing = true;
      continue;
    }
    std::string_view value;
    if (equals != std::string_view::npos) {
      value = arg.substr(equals + 1);
    } else {
      require(i + 1 < argc, "init: ", flag, " needs a value");
      value = argv[++i];
    }
    if (flag == "--loom-rank") options.overrides.rank = parse_count(flag, value);
    else if (flag == "--loom-world-size") options.overrides.size = parse_count(flag, value);
    else if (flag == "--loom-local-rank") options.overrides.local_rank = parse_count(flag, value);
    else if (flag == "--loom-timeout-ms") options.comm.timeout = std::chrono::milliseconds(parse_count(flag, value));
    else if (flag == "--loom-backend") options.backend = std::string(value);
    else if (flag == "--loom-device") {
      require(value == "cpu" || value == "cuda", "init: --loom-device must be cpu or cuda, got '", value, "'");
      options.device_type = value == "cpu" ? DeviceType::cpu : DeviceType::cuda;
    } else {
      fail(ErrorCategory::invalid_argument, "init: unknown flag ", flag,
           " (loom's flags: --loom-rank, --loom-world-size, --loom-local-rank, --loom-device, --loom-backend, "
           "--loom-allow-gpu-sharing, --loom-timeout-ms)");
    }
  }
  argc = kept;
  if (argv != nullptr) argv[argc] = nullptr;
  return options;
}

std::unique_ptr<World> init(int& argc, char**& argv, const InitOptions& base) {
  const InitOptions options = parse_init_flags(argc, argv, base);
  const comm::LaunchInfo launch = comm::detect_launch(options.overrides);
  const CudaRuntimeStatus cuda = cuda_runtime_status();
  const DeviceType type = options.device_type.value_or(cuda.available() ? DeviceType::cuda : DeviceType::cpu);
  require(type == DeviceType::cpu || cuda.available(), "init: a CUDA device was asked for, but there is none (",
          cuda.reason, ")");
  const Device device = type == DeviceType::cpu ? Device::cpu()
                                                : comm::device_for(launch, cuda.device_count, options.allow_gpu_sharing);

  std::string backend = options.backend;
  std::string why = "--loom-backend " + backend;
  if (backend == "auto") {
    BackendChoice choice{"nccl", "one GPU per rank"};
    if (device.is_cpu()) choice = launch.size == 1 ? BackendChoice{"in-process", "one process"} : choose_cpu_backend(launch);
    backend = choice.backend;
    why = choice.reason;
  }
  require(backend == "nccl" || backend == "mpi" || backend == "gloo" || backend == "in-process",
          "init: unknown backend '", backend, "' (auto, nccl, mpi, gloo or in-process)");
  require(backend != "gloo" || comm::gloo_built(), "init: the gloo backend was chosen (", why, ") but this loom was "
          "built without Gloo: install libgloo-dev (scripts/install-deps.sh) and rebuild, or launch with mpirun");
  require(backend != "mpi" || comm::mpi_built(), "init: the mpi backend was chosen (", why, ") but this loom was "
          "built without MPI: install libopenmpi-dev and rebuild, or set LOOM_CPU_BACKEND=gloo with MASTER_ADDR and "
          "MASTER_PORT");
  require(backend != "nccl" || device.is_cuda(), "init: the nccl backend needs a GPU, and this process uses the cpu");
  require(backend == "nccl" || device.is_cpu(), "init: the ", backend, " backend moves CPU tensors; on ", device,
          " use nccl (or --loom-device cpu)");
  require(backend != "nccl" || !options.allow_gpu_sharing || launch.size <= cuda.device_count,
          "init: NCCL needs one GPU per rank, but ", launch.size, " ranks share ", cuda.device_count,
          " GPU(s) (--loom-allow-gpu-sharing); use --loom-device cpu or fewer ranks");
  require(backend != "in-process" || launch.size == 1, "init: the in-process backend serves one process, but ",
          launch.launcher, " started ", launch.size, "; use mpi (mpirun) or gloo (torchrun) for CPU processes");

  const bool use_mpi = backend == "mpi" || (backend == "nccl" && launch.size > 1 && launched_by_mpi(launch) &&
                                            comm::mpi_built());
  // On an error below MPI stays initialized: finalizing would wait for peers that may be blocked
  // in the bootstrap; the process exits with the error instead and the launcher ends the job.
  const bool owns_mpi = use_mpi && comm::initialize_mpi();
  if (use_mpi) {
    const auto [mpi_rank, mpi_size] = comm::mpi_world();
    require(mpi_rank == launch.rank && mpi_size == launch.size, "init: ", launch.launcher, " says rank ", launch.rank,
            " of ", launch.size, " but MPI says rank ", mpi_rank, " of ", mpi_size,
            " (was the program started by a different MPI's launcher, or with conflicting --loom-* overrides? ",
            device.is_cpu() ? "Without mpirun, use the gloo backend: unset LOOM_CPU_BACKEND or set it to gloo)"
                            : "Without mpirun, NCCL shares its id through MASTER_ADDR/MASTER_PORT or LOOM_RENDEZVOUS_FILE)");
  }
  if (device.is_cuda()) set_current_cuda_device(device.index());  // this rank's contexts on its own GPU
  std::unique_ptr<comm::Communicator> comm = world_communicator(backend, launch, device, use_mpi, options.comm);
  return std::make_unique<World>(launch, device, std::move(comm), owns_mpi, backend + ": " + why);
}

}  // namespace loom
