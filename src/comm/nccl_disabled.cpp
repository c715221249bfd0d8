// The NCCL backend's entry points in a build without NCCL.
#include "loom/comm/nccl.hpp"

#include "loom/core/error.hpp"

namespace loom::comm {

NcclId make_nccl_id() {
  fail(ErrorCategory::invalid_argument, "NCCL: this loom was built without NCCL (a CUDA toolkit with NCCL is needed)");
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId&, int, int, Device, const CommOptions&) {
  make_nccl_id();
  return nullptr;
}

bool nccl_communicator_aborted() { return false; }

}  // namespace loom::comm
