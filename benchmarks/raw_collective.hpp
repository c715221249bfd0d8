// The backend's own collective on the same buffers (MPI_Allreduce & co., ncclAllReduce & co.),
// called directly: the baseline that shows what loom's Communicator adds.
#pragma once

#include <memory>
#include <string>

#include "loom/comm/world.hpp"

namespace loom::bench {

class RawCollective {
 public:
  virtual ~RawCollective() = default;
  virtual std::string name() const = 0;  // e.g. "MPI_Allreduce"
  // Runs `collective` (all_reduce, reduce_scatter or all_gather) to completion, in place when the
  // buffers are laid out as loom's in place (MPI: MPI_IN_PLACE); false when the backend has no
  // such call for this dtype (MPI has no f16/bf16).
  virtual bool run(const std::string& collective, const Tensor& input, const Tensor& output, comm::ReduceOp op) = 0;
  virtual void barrier() = 0;
};

// nullptr when the world's backend has no raw counterpart here (in-process; NCCL across
// processes without MPI to share the id).
std::unique_ptr<RawCollective> make_raw_collective(const World& world);

}  // namespace loom::bench
