// all_reduce: small buffers by a direct exchange (every rank sends its buffer to every other and
// reduces all of them in rank order: one message latency), middle sizes on a power-of-two number
// of ranks by recursive doubling (log2 size exchanges of the whole buffer), large ones by the ring
// (ring.cpp): choose_all_reduce (plan.hpp).
#include <array>
#include <cstring>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/combine.hpp"

namespace loom::comm::detail {

namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

void recursive_doubling(const MpiPeers& peers, const void* in, void* out, std::int64_t count, DType dtype,
                        ReduceOp op) {
  const int p = peers.size, r = peers.rank;
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  void* theirs = peers.transfers.scratch(0, bytes);
  const MPI_Datatype type = element_type(dtype);
  // The first step sends `in` itself and combines into out: no copy of in into out first.
  const void* partial = in;
  for (int distance = 1; distance < p; distance <<= 1) {
    const int peer = r ^ distance;
    std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check_mpi(MPI_Irecv(theirs, static_cast<int>(count), type, peer, tag_recursive_doubling, peers.comm, &requests[0]),
              peers.what);
    check_mpi(MPI_Isend(partial, static_cast<int>(count), type, peer, tag_recursive_doubling, peers.comm,
                        &requests[1]),
              peers.what);
    peers.transfers.wait_all(requests, peers.what);
    // The lower rank's partial first, so both compute the same bits.
    if (r < peer) combine(out, partial, theirs, count, dtype, op);
    else combine(out, theirs, partial, count, dtype, op);
    partial = out;
  }
}

}  // namespace

MPI_Datatype element_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: fail(ErrorCategory::invalid_argument, "MPI collectives: no MPI datatype for ", dtype);
  }
}

void all_reduce(const MpiPeers& peers, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op,
                std::optional<AllReduceAlgorithm> algorithm) {
  const std::int64_t bytes = count * static_cast<std::int64_t>(dtype_size(dtype));
  const AllReduceAlgorithm chosen =
      peers.size == 1 ? AllReduceAlgorithm::local : algorithm.value_or(choose_all_reduce(bytes, peers.size));
  require(chosen != AllReduceAlgorithm::recursive_doubling || power_of_two(peers.size), peers.what,
          ": recursive doubling needs a power-of-two number of ranks, not ", peers.size);
  switch (chosen) {
    case AllReduceAlgorithm::local:
      if (out != in) std::memcpy(out, in, static_cast<std::size_t>(bytes));
      return;
    case AllReduceAlgorithm::exchange:
      return exchange_with_all(peers, count, dtype, op, tag_exchange, [in](int) { return in; }, in, out);
    case AllReduceAlgorithm::recursive_doubling: return recursive_doubling(peers, in, out, count, dtype, op);
    case AllReduceAlgorithm::ring: {
      const BlockLayout layout{count, peers.size};
      auto* result = static_cast<unsigned char*>(out);
      // The reduce-scatter reads only `in` and writes only this rank's block of out, last; the
      // all-gather then writes the other blocks: in place or not, nothing is read after it is written.
      ring_reduce_scatter(peers, layout, in, result + static_cast<std::size_t>(layout.offset(peers.rank)) * dtype_size(dtype),
                          dtype, op, tag_ring_reduce_scatter);
      ring_all_gather(peers, layout, element_type(dtype), dtype_size(dtype), out, tag_ring_all_gather);
      return;
    }
  }
}

}  // namespace loom::comm::detail
