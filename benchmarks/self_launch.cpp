#include "self_launch.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "loom/comm/launch.hpp"
#include "loom/comm/mpi.hpp"
#include "loom/core/error.hpp"

namespace loom::bench {

std::string self_path(const std::string& tool) {
  std::vector<char> buffer(4096);
  const ssize_t n = readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  require(n > 0, tool, ": cannot read /proc/self/exe to relaunch itself");
  return std::string(buffer.data(), static_cast<std::size_t>(n));
}

namespace {

// A local TCP port that was free a moment ago (bound to port 0, read back, released).
int free_port(const std::string& tool) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (fd >= 0) ::close(fd);
  require(ok, tool, ": cannot find a free local port for the rendezvous");
  return ntohs(address.sin_port);
}

}  // namespace

nlohmann::json launch_self_job(const std::string& tool, int ranks, int threads, const std::string& arguments,
                               const std::string& launcher) {
  require(launcher == "mpirun" || launcher == "torchrun", tool, ": unknown launcher '", launcher, "'");
  require(ranks == 1 || launcher == "torchrun" || comm::mpi_built(), tool, ": ", ranks, " ranks need a build with MPI");
  const std::string scratch_template = "/tmp/" + tool + "_XXXXXX";
  std::vector<char> scratch(scratch_template.begin(), scratch_template.end());
  scratch.push_back('\0');
  const int fd = mkstemp(scratch.data());
  require(fd >= 0, tool, ": cannot create a scratch file in /tmp");
  close(fd);
  std::ostringstream command;
  const std::string worker = " --worker --worker-json " + std::string(scratch.data()) + " " + arguments;
  if (launcher == "torchrun") {
    // The rendezvous listens on MASTER_PORT + 1: the free port found.
    command << "bash -c 'pids=(); for r in $(seq 0 " << ranks - 1 << "); do OMP_NUM_THREADS=" << threads
            << " RANK=$r WORLD_SIZE=" << ranks << " LOCAL_RANK=$r LOCAL_WORLD_SIZE=" << ranks
            << " MASTER_ADDR=127.0.0.1 MASTER_PORT=" << free_port(tool) - 1 << " \"" << self_path(tool) << "\"" << worker
            << " & pids+=($!); done; s=0; for p in \"${pids[@]}\"; do wait $p || s=1; done; exit $s'";
  } else {
    command << "env OMP_NUM_THREADS=" << threads << " ";
    if (comm::mpi_built()) command << "mpirun -np " << ranks << " --oversubscribe --bind-to none -x OMP_NUM_THREADS ";
    command << "'" << self_path(tool) << "'" << worker;
  }
  std::fflush(stdout);
  const int status = std::system(command.str().c_str());
  std::ifstream in(scratch.data());
  nlohmann::json rows;
  if (status == 0 && in) rows = nlohmann::json::parse(in);
  std::remove(scratch.data());
  require(status == 0 && rows.is_array(), tool, ": the job `", command.str(), "` failed (status ", status, ")");
  for (auto& row : rows) row["threads_per_rank"] = threads;
  return rows;
}

int self_launching_main(const std::string& tool, CLI::App& app, int argc, char** argv, const bool& worker,
                        const std::function<int(const InitOptions&, int, char**)>& run_worker,
                        const std::function<int()>& run_orchestrator) {
  try {
    const InitOptions init = parse_init_flags(argc, argv);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& error) {
      return app.exit(error);
    }
    const bool launched = comm::detect_launch().launcher != "single process";
    if (worker || launched) return run_worker(init, argc, argv);
    return run_orchestrator();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), error.what());
    return 1;
  }
}

}  // namespace loom::bench
