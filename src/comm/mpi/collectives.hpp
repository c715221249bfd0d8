// loom's collective algorithms over MPI point-to-point messages (gloo's approach, one family per
// file). Every transfer is a nonblocking send or receive waited for by MpiTransfers, so a call
// never blocks inside MPI: a rank whose peer stops waits sleeping and answering its peers, its
// call fails at the timeout naming the missing ranks, and the call can run on whichever thread
// waits for it. The algorithms are the ones MPI libraries choose for one node and a few ranks,
// picked by message size (choose_*, pure functions): on 2 Intel cores they match Open MPI's tuned
// blocking collectives (benchmarks/allreduce_bench has both columns).
//
// Results are the same bits on every rank, and from run to run: every element is combined in an
// order fixed by the ranks and the sizes (rank order for the direct exchanges; the lower rank's
// partial first in recursive doubling; along the ring from the block's successor in the ring).
// Element types are f32, i32 and i64 (the backend widens f16/bf16 to f32); ops sum, max and min
// (avg is a sum the backend divides).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "loom/comm/communicator.hpp"
#include "src/comm/mpi/plan.hpp"
#include "src/comm/mpi/transfers.hpp"

namespace loom::comm::detail {

// Who takes part in a call, and how its transfers are waited for.
struct MpiPeers {
  MPI_Comm comm;  // the communicator's duplicate for collective traffic
  int rank, size;
  MpiTransfers& transfers;
  const std::string& what;  // the call, for errors
};

MPI_Datatype element_type(DType dtype);

// The collectives. `algorithm` overrides the choice (tests run every algorithm on every rank count).
// out = op over ranks of in (count elements); out may be in.
void all_reduce(const MpiPeers& peers, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op,
                std::optional<AllReduceAlgorithm> algorithm = std::nullopt);
// out (block elements) = this rank's block of op over ranks of in (size x block); out may be this
// rank's block of in (the other blocks of in are then left as they were).
void reduce_scatter(const MpiPeers& peers, const void* in, void* out, std::int64_t block, DType dtype, ReduceOp op,
                    std::optional<ScatterGatherAlgorithm> algorithm = std::nullopt);
// out (size x block_bytes) = the ranks' in in rank order; in may be this rank's block of out, or
// lie anywhere else, even overlapping out.
void all_gather(const MpiPeers& peers, const void* in, void* out, std::int64_t block_bytes,
                std::optional<ScatterGatherAlgorithm> algorithm = std::nullopt);
void broadcast(const MpiPeers& peers, void* data, std::int64_t bytes, int root,
               std::optional<BroadcastAlgorithm> algorithm = std::nullopt);
// root's out = op over ranks of in; out is not written elsewhere; in is left as it was.
void reduce(const MpiPeers& peers, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op, int root);

// One step of a reduction between two ranks: sends send_count elements of `send` to rank `to`,
// receives receive_count elements from rank `from` and stores destination = op(received, mine)
// (or op(mine, received)) element by element, segment by segment as they arrive. destination may
// be mine; send must not be written meanwhile.
struct SegmentedExchange {
  const void* send;
  std::int64_t send_count;
  int to;
  const void* mine;
  std::int64_t receive_count;
  int from;
  void* destination;
  bool received_first;
};
void exchange_and_combine(const MpiPeers& peers, const SegmentedExchange& exchange, DType dtype, ReduceOp op, int tag);

// With every other rank q at once: sends count elements of send_to(q) to q, receives q's count
// elements, and stores out = op over ranks in rank order (this rank's part is `mine`). out may be
// mine or what was sent.
void exchange_with_all(const MpiPeers& peers, std::int64_t count, DType dtype, ReduceOp op, int tag,
                       const std::function<const void*(int)>& send_to, const void* mine, void* out);

// The ring's two halves on `layout` (its counts in elements): ring_reduce_scatter leaves in
// `out_block` this rank's block of op over ranks of in; ring_all_gather fills every other block of
// data (elements of MPI type `type`, element_bytes each) from the ranks that hold them.
void ring_reduce_scatter(const MpiPeers& peers, const BlockLayout& layout, const void* in, void* out_block,
                         DType dtype, ReduceOp op, int tag);
void ring_all_gather(const MpiPeers& peers, const BlockLayout& layout, MPI_Datatype type, std::size_t element_bytes,
                     void* data, int tag);

// Message tags on the collective communicator, one per algorithm's stage.
enum CollectiveTag : int {
  tag_exchange = 301,
  tag_recursive_doubling,
  tag_ring_reduce_scatter,
  tag_ring_all_gather,
  tag_direct_reduce_scatter,
  tag_direct_all_gather,
  tag_broadcast,
  tag_scatter,
  tag_reduce,
};

}  // namespace loom::comm::detail
