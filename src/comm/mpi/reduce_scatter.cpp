// reduce_scatter and all_gather: directly (rank q sends block j to rank j, and each rank reduces
// what it received in rank order, or stores it) for small buffers and few ranks; around the ring
// (ring.cpp) otherwise, which moves the same bytes one block at a time with one transfer in flight
// per rank. On two ranks the direct reduce-scatter is one segmented exchange (ring.cpp).
#include <cstring>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/combine.hpp"

namespace loom::comm::detail {

namespace {

void direct_reduce_scatter(const MpiPeers& peers, const void* in, void* out, std::int64_t block, DType dtype,
                           ReduceOp op) {
  const int p = peers.size, r = peers.rank;
  const std::size_t bytes = static_cast<std::size_t>(block) * dtype_size(dtype);
  const auto* input = static_cast<const unsigned char*>(in);
  if (p == 2) {  // one exchange, combined in rank order as it arrives
    const int peer = 1 - r;
    return exchange_and_combine(peers,
                                {input + static_cast<std::size_t>(peer) * bytes, block, peer,
                                 input + static_cast<std::size_t>(r) * bytes, block, peer, out, r == 1},
                                dtype, op, tag_direct_reduce_scatter);
  }
  exchange_with_all(
      peers, block, dtype, op, tag_direct_reduce_scatter,
      [&](int q) { return input + static_cast<std::size_t>(q) * bytes; }, input + static_cast<std::size_t>(r) * bytes,
      out);  // out may be this rank's block of in: combine_in_order reads before it writes
}

// in is this rank's block: sent as it is, and copied into out while the transfers run (unless it
// is already there).
void direct_all_gather(const MpiPeers& peers, const void* in, void* out, std::int64_t block_bytes) {
  const int p = peers.size, r = peers.rank;
  auto* output = static_cast<unsigned char*>(out);
  const auto bytes = static_cast<std::size_t>(block_bytes);
  const std::span<MPI_Request> requests = peers.transfers.requests(2 * static_cast<std::size_t>(p - 1));
  for (int q = 0, slot = 0; q < p; ++q) {
    if (q == r) continue;
    check_mpi(MPI_Irecv(output + static_cast<std::size_t>(q) * bytes, static_cast<int>(block_bytes), MPI_BYTE, q,
                        tag_direct_all_gather, peers.comm, &requests[2 * static_cast<std::size_t>(slot)]),
              peers.what);
    check_mpi(MPI_Isend(in, static_cast<int>(block_bytes), MPI_BYTE, q, tag_direct_all_gather, peers.comm,
                        &requests[2 * static_cast<std::size_t>(slot) + 1]),
              peers.what);
    ++slot;
  }
  unsigned char* mine = output + static_cast<std::size_t>(r) * bytes;
  if (in != mine) std::memcpy(mine, in, bytes);
  peers.transfers.wait_all(requests, peers.what);
}

}  // namespace

void reduce_scatter(const MpiPeers& peers, const void* in, void* out, std::int64_t block, DType dtype, ReduceOp op,
                    std::optional<ScatterGatherAlgorithm> algorithm) {
  const std::int64_t bytes = block * peers.size * static_cast<std::int64_t>(dtype_size(dtype));
  switch (peers.size == 1 ? ScatterGatherAlgorithm::local : algorithm.value_or(choose_scatter_gather(bytes, peers.size))) {
    case ScatterGatherAlgorithm::local:
      if (out != in) std::memmove(out, in, static_cast<std::size_t>(bytes));
      return;
    case ScatterGatherAlgorithm::direct: return direct_reduce_scatter(peers, in, out, block, dtype, op);
    case ScatterGatherAlgorithm::ring:
      return ring_reduce_scatter(peers, BlockLayout{block * peers.size, peers.size}, in, out, dtype, op,
                                 tag_ring_reduce_scatter);
  }
}

void all_gather(const MpiPeers& peers, const void* in, void* out, std::int64_t block_bytes,
                std::optional<ScatterGatherAlgorithm> algorithm) {
  const auto bytes = static_cast<std::size_t>(block_bytes);
  auto* output = static_cast<unsigned char*>(out);
  auto* mine = output + static_cast<std::size_t>(peers.rank) * bytes;
  const auto* input = static_cast<const unsigned char*>(in);
  const bool outside = input + bytes <= output || input >= output + bytes * static_cast<std::size_t>(peers.size);
  if (in != mine && !outside) {  // in overlaps out elsewhere: in its place before anything arrives
    std::memmove(mine, in, bytes);
    in = mine;
  }
  switch (peers.size == 1 ? ScatterGatherAlgorithm::local
                          : algorithm.value_or(choose_scatter_gather(block_bytes * peers.size, peers.size))) {
    case ScatterGatherAlgorithm::local:
      if (in != mine) std::memcpy(mine, in, bytes);
      return;
    case ScatterGatherAlgorithm::direct: return direct_all_gather(peers, in, out, block_bytes);
    case ScatterGatherAlgorithm::ring:
      if (in != mine) std::memcpy(mine, in, bytes);
      return ring_all_gather(peers, BlockLayout{block_bytes * peers.size, peers.size}, MPI_BYTE, 1, out,
                             tag_ring_all_gather);
  }
}

}  // namespace loom::comm::detail
