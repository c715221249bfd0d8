// The MPI backend: CPU tensors between processes. Each communicator runs its calls in order, on its
// own thread or on the thread that waits for them, so every call is asynchronous and overlaps the
// caller's computation. The collectives are loom's algorithms over nonblocking MPI point-to-point
// messages (src/comm/mpi/), so no call blocks inside MPI: a call that its peers do not join within
// CommOptions::timeout fails naming them, the communicator is aborted, and the peers are told.
// MPI must be initialized with MPI_THREAD_MULTIPLE (loom::init does that).
#pragma once

#include <memory>
#include <span>
#include <utility>

#include "loom/comm/communicator.hpp"

namespace loom::comm {

// A communicator over all processes of MPI_COMM_WORLD (a duplicate of it, so loom's traffic
// never matches the application's own MPI calls). Throws when loom was built without MPI, MPI is
// not initialized, or its thread level is below MPI_THREAD_MULTIPLE.
std::unique_ptr<Communicator> make_mpi_world_communicator(const CommOptions& options = {});

// Bootstrap helpers (loom::init). mpi_built: this loom has the MPI backend. initialize_mpi:
// MPI_Init_thread with MPI_THREAD_MULTIPLE unless MPI is already initialized; true when it
// initialized MPI (the caller then finalizes it with finalize_mpi). mpi_world: rank and size in
// MPI_COMM_WORLD. mpi_broadcast_bytes: root's bytes to every process of MPI_COMM_WORLD.
bool mpi_built();
bool initialize_mpi();
void finalize_mpi();
std::pair<int, int> mpi_world();
void mpi_broadcast_bytes(std::span<unsigned char> bytes, int root);

// True after an MPI call timed out and its progress thread was left stuck in MPI: the process
// must then exit without MPI_Finalize (which would wait for that call). loom::init's World does so.
bool mpi_calls_were_abandoned();
// True once an MPI communicator of this process was aborted (a timeout, a peer's notice, an MPI
// error): a peer may be stopped or gone, and MPI_Finalize, which waits for every process, could wait
// forever. loom::init's World then does not finalize either.
bool mpi_communicator_aborted();

}  // namespace loom::comm
