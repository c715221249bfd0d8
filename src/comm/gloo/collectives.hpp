// loom's collective algorithms over Gloo's point-to-point transfers (the same families as the MPI
// backend's, src/comm/mpi/): every transfer is waited for by GlooLink, so a call ends at its
// deadline naming the peer it waits for, or at once when a peer aborts or its connection fails.
//
// Small messages go in one step, straight to every rank that needs them (one message latency:
// TCP's is tens of microseconds), as do all-reduces on two ranks at any size (each rank sends the
// buffer once, as in the ring, but in one step); large all-reduces and reduce-scatters on more
// ranks take the ring, so each rank sends and receives about twice the buffer whatever the count. Results are the same
// bits on every rank and from run to run: the direct exchanges combine the ranks in rank order;
// the ring combines each block along the ring from its successor (op(received, mine)), once, and
// the all-gather copies it. Element types f32, i32 and i64 (the backend widens f16/bf16); ops sum,
// max and min (avg is a sum the backend divides).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "src/comm/gloo/link.hpp"

namespace loom::comm::detail {

// Scratch memory reused from call to call; handed to the link for every call that uses it, so it
// is kept if the call is aborted with transfers still posted into it.
class GlooScratch {
 public:
  static constexpr int slots = 3;  // 0 what arrives, 1 partial results, 2 the backend's staging
  void* get(GlooLink& link, int slot, std::size_t bytes);

 private:
  std::shared_ptr<std::vector<unsigned char>> memory_[slots];
};

// Who takes part in a call and where its transfers go.
struct GlooCall {
  GlooLink& link;
  GlooScratch& scratch;
  std::int64_t collective;  // the call's number among the collectives: its messages' slots
  const std::string& what;  // the call, for errors
};

// out = op over ranks of in (count elements); out may be in.
void gloo_all_reduce(const GlooCall& call, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op);
// out (block elements) = this rank's block of op over ranks of in (size x block); out may be this
// rank's block of in, but no other part of it.
void gloo_reduce_scatter(const GlooCall& call, const void* in, void* out, std::int64_t block, DType dtype, ReduceOp op);
// out (size x block_bytes) = the ranks' in, in rank order; in may be this rank's block of out.
void gloo_all_gather(const GlooCall& call, const void* in, void* out, std::size_t block_bytes);
void gloo_broadcast(const GlooCall& call, void* data, std::size_t bytes, int root);
// root's out = op over ranks of in; nothing is written elsewhere.
void gloo_reduce(const GlooCall& call, const void* in, void* out, std::int64_t count, DType dtype, ReduceOp op,
                 int root);
void gloo_barrier(const GlooCall& call);

// The limits (bytes one rank sends in all) up to which the calls go direct, not by the ring.
inline constexpr std::size_t gloo_direct_all_reduce_bytes = std::size_t{256} << 10;
inline constexpr std::size_t gloo_direct_scatter_gather_bytes = std::size_t{1} << 20;

}  // namespace loom::comm::detail
