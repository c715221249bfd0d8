// Checked wrapper for MPI return codes (builds with LOOM_WITH_MPI). Takes the int every MPI call
// returns, so this header does not need mpi.h.
#pragma once

#include <string_view>

namespace loom {

// Throws an mpi Error naming the call, the error class and MPI's description unless
// status == MPI_SUCCESS.
void check_mpi(int status, std::string_view call);

}  // namespace loom
