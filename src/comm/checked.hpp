// LOOM_DEBUG_COLLECTIVES: a Communicator wrapper that, before each call, exchanges a small
// signature of it (operation, count, dtype, op, root, call number) with the other ranks through
// the wrapped communicator and fails with an error naming every rank's call when they differ,
// instead of letting mismatched calls hang or corrupt data. Point-to-point calls check their
// pair (sender's count and dtype against the receiver's).
#pragma once

#include <memory>

#include "loom/comm/communicator.hpp"

namespace loom::comm::detail {

std::unique_ptr<Communicator> with_collective_checks(std::unique_ptr<Communicator> inner);

}  // namespace loom::comm::detail
