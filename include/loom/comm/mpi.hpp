// The MPI backend: CPU tensors between processes. Each communicator runs its calls in order on its
// own progress thread, so every call is asynchronous and overlaps the caller's computation; the
// calls themselves are MPI's blocking collectives (the tuned algorithms). A watchdog fails a
// call that its peers do not join within CommOptions::timeout and aborts the communicator.
// MPI must be initialized with MPI_THREAD_MULTIPLE (loom::init does that).
#pragma once

#include <memory>

#include "loom/comm/communicator.hpp"

namespace loom::comm {

// A communicator over all processes of MPI_COMM_WORLD (a duplicate of it, so loom's traffic
// never matches the application's own MPI calls). Throws when loom was built without MPI, MPI is
// not initialized, or its thread level is below MPI_THREAD_MULTIPLE.
std::unique_ptr<Communicator> make_mpi_world_communicator(const CommOptions& options = {});

// True after an MPI call timed out and its progress thread was left stuck in MPI: the process
// must then exit without MPI_Finalize (which would wait for that call). loom::init's World does so.
bool mpi_calls_were_abandoned();

}  // namespace loom::comm
