// The ring: in step s of the reduce-scatter, rank r sends the partial sum of block r - s - 1 to its
// right neighbour and adds its own part of block r - s - 2 to what arrives from its left; after
// size - 1 steps it holds block r summed over all ranks (in ring order, starting after r). The
// all-gather then passes the finished blocks around the ring in size - 1 more steps. Each rank sends
// and receives 2 (size - 1) / size of the buffer: bandwidth-optimal for large buffers.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/combine.hpp"

namespace loom::comm::detail {

void ring_reduce_scatter(const MpiPeers& peers, const BlockLayout& layout, const void* in, void* out_block,
                         DType dtype, ReduceOp op, int tag) {
  const int p = peers.size, r = peers.rank;
  const std::size_t element = dtype_size(dtype);
  const auto* input = static_cast<const unsigned char*>(in);
  const auto at = [&](int block) { return input + static_cast<std::size_t>(layout.offset(block)) * element; };
  if (p == 1) {
    if (out_block != in) std::memmove(out_block, in, static_cast<std::size_t>(layout.count) * element);
    return;
  }
  // Two partial sums: the one being sent, and the one being summed into from what arrives.
  unsigned char* partial[2] = {nullptr, nullptr};
  if (p > 2) {
    const std::size_t longest = static_cast<std::size_t>(layout.length(0)) * element;
    partial[0] = peers.transfers.scratch<unsigned char>(1, longest);
    partial[1] = peers.transfers.scratch<unsigned char>(2, longest);
  }
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  const void* sending = at((r - 1 + p) % p);  // step 0 sends this rank's own part
  for (int step = 0; step < p - 1; ++step) {
    const int send_block = (r - step - 1 + 2 * p) % p, receive_block = (r - step - 2 + 2 * p) % p;
    void* destination = step == p - 2 ? out_block : partial[step % 2];  // the last step's block is this rank's
    exchange_and_combine(peers,
                         {sending, layout.length(send_block), right, at(receive_block), layout.length(receive_block),
                          left, destination, true},
                         dtype, op, tag);
    sending = destination;
  }
}

void ring_all_gather(const MpiPeers& peers, const BlockLayout& layout, MPI_Datatype type, std::size_t element_bytes,
                     void* data, int tag) {
  const int p = peers.size, r = peers.rank;
  auto* base = static_cast<unsigned char*>(data);
  const auto at = [&](int block) { return base + static_cast<std::size_t>(layout.offset(block)) * element_bytes; };
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  for (int step = 0; step < p - 1; ++step) {
    const int send_block = (r - step + p) % p, receive_block = (r - step - 1 + p) % p;
    std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check_mpi(MPI_Irecv(at(receive_block), static_cast<int>(layout.length(receive_block)), type, left, tag, peers.comm,
                        &requests[0]),
              peers.what);
    check_mpi(MPI_Isend(at(send_block), static_cast<int>(layout.length(send_block)), type, right, tag, peers.comm,
                        &requests[1]),
              peers.what);
    peers.transfers.wait_all(requests, peers.what);
  }
}

}  // namespace loom::comm::detail
