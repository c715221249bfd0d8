// broadcast and reduce, the calls with a root. Both walk a binomial tree over the ranks numbered
// from the root (in round k, rank v exchanges with rank v + 2^k): log2 size rounds of the whole
// buffer. A large broadcast to more than two ranks is instead scattered from the root and
// all-gathered around the ring, which moves about twice the buffer through each rank instead of
// log2 size times.
#include <array>
#include <cstring>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/combine.hpp"

namespace loom::comm::detail {

namespace {

int from_root(int rank, int root, int size) { return (rank - root + size) % size; }
int to_rank(int relative, int root, int size) { return (relative + root) % size; }

void binomial_broadcast(const MpiPeers& peers, void* data, std::int64_t bytes, int root) {
  const int p = peers.size, v = from_root(peers.rank, root, p);
  int mask = 1;
  for (; mask < p; mask <<= 1) {
    if ((v & mask) == 0) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, to_rank(v - mask, root, p), tag_broadcast, peers.comm,
                        &request),
              peers.what);
    peers.transfers.wait_all(std::span<MPI_Request>(&request, 1), peers.what);
    break;
  }
  std::vector<MPI_Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask >= p) continue;
    sends.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, to_rank(v + mask, root, p), tag_broadcast, peers.comm,
                        &sends.back()),
              peers.what);
  }
  peers.transfers.wait_all(sends, peers.what);
}

void scatter_all_gather(const MpiPeers& peers, void* data, std::int64_t bytes, int root) {
  const int p = peers.size, r = peers.rank;
  const BlockLayout layout{bytes, p};
  auto* base = static_cast<unsigned char*>(data);
  std::vector<MPI_Request> requests;
  if (r == root) {
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      requests.push_back(MPI_REQUEST_NULL);
      check_mpi(MPI_Isend(base + layout.offset(q), static_cast<int>(layout.length(q)), MPI_BYTE, q, tag_scatter,
                          peers.comm, &requests.back()),
                peers.what);
    }
  } else {
    requests.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Irecv(base + layout.offset(r), static_cast<int>(layout.length(r)), MPI_BYTE, root, tag_scatter,
                        peers.comm, &requests.back()),
              peers.what);
  }
  peers.transfers.wait_all(requests, peers.what);
  ring_all_gather(peers, layout, MPI_BYTE, 1, data, tag_ring_all_gather);
}

}  // namespace

void broadcast(const MpiPeers& peers, void* data, std::int64_t bytes, int root,
               std::optional<BroadcastAlgorithm> algorithm) {
  switch (peers.size == 1 ? BroadcastAlgorithm::local : algorithm.value_or(choose_broadcast(bytes, peers.size))) {
    case BroadcastAlgorithm::local: return;
    case BroadcastAlgorithm::binomial: return binomial_broadcast(peers, data, bytes, root);
    case BroadcastAlgorithm::scatter_all_gather: return scatter_all_gather(peers, data, bytes, root);
  }
}

void reduce(const MpiPeers& peers, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op, int root) {
  const int p = peers.size, v = from_root(peers.rank, root, p);
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  // The partial sum of this rank's subtree, starting as its own input (in is left as it was).
  auto* partial = peers.transfers.scratch<unsigned char>(1, bytes);
  std::memcpy(partial, in, bytes);
  void* theirs = peers.transfers.scratch(0, bytes);
  const MPI_Datatype type = element_type(dtype);
  for (int mask = 1; mask < p; mask <<= 1) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (v & mask) {  // this subtree is done: up to its parent
      check_mpi(MPI_Isend(partial, static_cast<int>(count), type, to_rank(v - mask, root, p), tag_reduce, peers.comm,
                          &request),
                peers.what);
      peers.transfers.wait_all(std::span<MPI_Request>(&request, 1), peers.what);
      return;
    }
    if (v + mask >= p) continue;
    check_mpi(MPI_Irecv(theirs, static_cast<int>(count), type, to_rank(v + mask, root, p), tag_reduce, peers.comm,
                        &request),
              peers.what);
    peers.transfers.wait_all(std::span<MPI_Request>(&request, 1), peers.what);
    combine(partial, partial, theirs, count, dtype, op);  // the lower-numbered subtree first
  }
  std::memcpy(out, partial, bytes);  // only the root gets here
}

}  // namespace loom::comm::detail
