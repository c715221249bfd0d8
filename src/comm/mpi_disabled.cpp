// The MPI backend's entry points in a build without MPI (LOOM_MPI=OFF or no MPI found).
#include "loom/comm/mpi.hpp"

#include "loom/core/error.hpp"

namespace loom::comm {

namespace {
[[noreturn]] void no_mpi(const char* what) {
  fail(ErrorCategory::invalid_argument, what,
       ": this loom was built without MPI (configure with LOOM_MPI=ON and Open MPI installed)");
}
}  // namespace

std::unique_ptr<Communicator> make_mpi_world_communicator(const CommOptions&) { no_mpi("MPI communicator"); }
bool mpi_built() { return false; }
bool initialize_mpi() { no_mpi("MPI initialization"); }
void finalize_mpi() {}
std::pair<int, int> mpi_world() { no_mpi("MPI world"); }
void mpi_broadcast_bytes(std::span<unsigned char>, int) { no_mpi("MPI broadcast"); }

bool mpi_calls_were_abandoned() { return false; }
bool mpi_communicator_aborted() { return false; }

}  // namespace loom::comm
