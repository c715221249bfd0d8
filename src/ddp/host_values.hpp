// Host values through a communicator of any backend: staged in tensors on its device (NCCL only
// reduces device memory) and waited for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::ddp::detail {

std::int64_t all_reduce_value(comm::Communicator& comm, std::int64_t value, comm::ReduceOp op);
// Elementwise over the ranks; every rank passes the same number of values.
std::vector<std::int64_t> all_reduce_values(comm::Communicator& comm, const std::vector<std::int64_t>& values,
                                            comm::ReduceOp op);
std::vector<std::int64_t> broadcast_values(comm::Communicator& comm, std::vector<std::int64_t> values, int root);
// root's text on every rank (the others' `text` is ignored).
std::string broadcast_text(comm::Communicator& comm, const std::string& text, int root);

}  // namespace loom::ddp::detail
