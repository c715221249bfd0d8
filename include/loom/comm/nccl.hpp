// The NCCL backend: CUDA tensors, one GPU per rank. Calls are enqueued on the communicator's own
// stream after an event recorded on the stream the caller passes, so communication overlaps
// compute; a watcher thread completes each Work when its end event has passed. The NCCL
// communicator is non-blocking: the watcher polls ncclCommGetAsyncError, and a call that is not
// done within CommOptions::timeout of becoming the oldest in flight (a dead or stuck peer, or a
// kernel before it on the caller's stream that hangs: the message says which) fails, with every
// later one, with a timeout Error instead of hanging, and NCCL is aborted (ncclCommAbort, on a
// thread of its own: it waits for NCCL's streams). Teardown waits a bounded time and leaves
// allocated what the GPU may still use.
// Each rank must pass a different device. f16/bf16 are reduced by NCCL in their own precision.
#pragma once

#include <array>
#include <memory>

#include "loom/comm/communicator.hpp"

namespace loom::comm {

// An ncclUniqueId as bytes, so that this header does not need nccl.h.
using NcclId = std::array<unsigned char, 128>;

// A new id (on rank 0; the others receive it through MPI, TCP or a file: see loom::init).
NcclId make_nccl_id();

// Collective over the `size` ranks that pass the same id. Throws when loom was built without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int rank, int size, Device device,
                                                     const CommOptions& options = {});

// True once an NCCL communicator of this process was aborted (a timeout, an error, abort()): its
// peers may still be waiting in NCCL, and MPI_Finalize (the bootstrap's) could wait for them.
bool nccl_communicator_aborted();

}  // namespace loom::comm
