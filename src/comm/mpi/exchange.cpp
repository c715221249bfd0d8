// The exchanges the collectives are made of: with one peer, segment by segment (exchange_and_combine:
// a step of the ring, the two-rank reduce-scatter), and with every peer at once (exchange_with_all:
// the small all-reduce, the direct reduce-scatter), combining what arrives in an order fixed by the
// ranks.
#include <algorithm>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/combine.hpp"

namespace loom::comm::detail {

void exchange_and_combine(const MpiPeers& peers, const SegmentedExchange& x, DType dtype, ReduceOp op, int tag) {
  const std::size_t element = dtype_size(dtype);
  const auto e = static_cast<std::int64_t>(element);
  const std::int64_t send_segment = segment_elements(x.send_count, e), per_segment = segment_elements(x.receive_count, e);
  const auto segments = [](std::int64_t count, std::int64_t each) { return count == 0 ? 0 : (count + each - 1) / each; };
  const std::int64_t sends = segments(x.send_count, send_segment), receives = segments(x.receive_count, per_segment);
  const MPI_Datatype type = element_type(dtype);
  // Two receives in flight (posted before the peer's sends arrive), then all the sends; each
  // segment that arrives is combined, and its landing place given to the next but one.
  const std::span<MPI_Request> requests = peers.transfers.requests(static_cast<std::size_t>(sends + 2));
  auto* landing = peers.transfers.scratch<unsigned char>(
      0, static_cast<std::size_t>(std::min<std::int64_t>(receives, 2) * per_segment) * element);
  const auto post = [&](std::int64_t k) {
    const std::int64_t n = std::min(per_segment, x.receive_count - k * per_segment);
    check_mpi(MPI_Irecv(landing + static_cast<std::size_t>(k % 2 * per_segment) * element, static_cast<int>(n), type,
                        x.from, tag, peers.comm, &requests[static_cast<std::size_t>(k % 2)]),
              peers.what);
  };
  for (std::int64_t k = 0; k < std::min<std::int64_t>(2, receives); ++k) post(k);
  const auto* send = static_cast<const unsigned char*>(x.send);
  for (std::int64_t k = 0; k < sends; ++k) {
    const std::int64_t begin = k * send_segment, n = std::min(send_segment, x.send_count - begin);
    check_mpi(MPI_Isend(send + static_cast<std::size_t>(begin) * element, static_cast<int>(n), type, x.to, tag,
                        peers.comm, &requests[static_cast<std::size_t>(2 + k)]),
              peers.what);
  }
  const auto* mine = static_cast<const unsigned char*>(x.mine);
  auto* destination = static_cast<unsigned char*>(x.destination);
  for (std::int64_t k = 0; k < receives; ++k) {
    peers.transfers.wait_all(requests.subspan(static_cast<std::size_t>(k % 2), 1), peers.what, requests);
    const std::int64_t begin = k * per_segment, n = std::min(per_segment, x.receive_count - begin);
    const auto offset = static_cast<std::size_t>(begin) * element;
    const void* received = landing + static_cast<std::size_t>(k % 2 * per_segment) * element;
    if (x.received_first) combine(destination + offset, received, mine + offset, n, dtype, op);
    else combine(destination + offset, mine + offset, received, n, dtype, op);
    if (k + 2 < receives) post(k + 2);
  }
  peers.transfers.wait_all(requests, peers.what);
}

void exchange_with_all(const MpiPeers& peers, std::int64_t count, DType dtype, ReduceOp op, int tag,
                       const std::function<const void*(int)>& send_to, const void* mine, void* out) {
  const int p = peers.size, r = peers.rank;
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  auto* theirs = peers.transfers.scratch<unsigned char>(0, bytes * static_cast<std::size_t>(p - 1));
  const MPI_Datatype type = element_type(dtype);
  const std::span<MPI_Request> requests = peers.transfers.requests(2 * static_cast<std::size_t>(p - 1));
  const std::span<const void*> inputs = peers.transfers.pointers(static_cast<std::size_t>(p));
  for (int q = 0, slot = 0; q < p; ++q) {
    if (q == r) {
      inputs[static_cast<std::size_t>(q)] = mine;
      continue;
    }
    unsigned char* into = theirs + static_cast<std::size_t>(slot) * bytes;
    inputs[static_cast<std::size_t>(q)] = into;
    const auto at = 2 * static_cast<std::size_t>(slot);
    check_mpi(MPI_Irecv(into, static_cast<int>(count), type, q, tag, peers.comm, &requests[at]), peers.what);
    check_mpi(MPI_Isend(send_to(q), static_cast<int>(count), type, q, tag, peers.comm, &requests[at + 1]), peers.what);
    ++slot;
  }
  // Every send is done before out is written: out may be what was sent.
  peers.transfers.wait_all(requests, peers.what);
  combine_in_order(out, inputs, count, dtype, op);
}

}  // namespace loom::comm::detail
