// The MPI backend's entry points in a build without MPI (LOOM_MPI=OFF or no MPI found).
#include "loom/comm/mpi.hpp"

#include "loom/core/error.hpp"

namespace loom::comm {

std::unique_ptr<Communicator> make_mpi_world_communicator(const CommOptions&) {
  fail(ErrorCategory::invalid_argument,
       "MPI communicator: this loom was built without MPI (configure with LOOM_MPI=ON and Open MPI installed)");
}

bool mpi_calls_were_abandoned() { return false; }

}  // namespace loom::comm
