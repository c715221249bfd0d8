// Agreement among the ranks (public: ddp, topo, shard and io build on it). Host values through a communicator of any backend, staged in tensors on its device (NCCL only
// reduces device memory) and waited for; and the agreements built from them that keep every rank
// issuing the same collectives after something failed on one of them. Every function is a
// collective.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::comm {

std::int64_t all_reduce_value(comm::Communicator& comm, std::int64_t value, comm::ReduceOp op);
// Elementwise over the ranks; every rank passes the same number of values.
std::vector<std::int64_t> all_reduce_values(comm::Communicator& comm, const std::vector<std::int64_t>& values,
                                            comm::ReduceOp op);
std::vector<std::int64_t> broadcast_values(comm::Communicator& comm, std::vector<std::int64_t> values, int root);
// root's text on every rank (the others' `text` is ignored).
std::string broadcast_text(comm::Communicator& comm, const std::string& text, int root);
// Every rank's text, in rank order.
std::vector<std::string> all_gather_texts(comm::Communicator& comm, const std::string& mine);
// Every rank's values, rank after rank; every rank passes the same number (telemetry's summaries).
std::vector<float> all_gather_values(comm::Communicator& comm, const std::vector<float>& mine);

// Tells every rank about the lowest rank whose `local` failure is set: that rank rethrows its
// error; the others throw one of the same category naming it and its message, after `context`.
// `lowest_failed` is that rank when already agreed (then no collective is needed to find it).
[[noreturn]] void throw_failure_of(comm::Communicator& comm, int lowest_failed, const std::exception_ptr& local,
                                   std::string_view context);
// The collective check: returns when no rank failed, else throw_failure_of.
void throw_if_any_failed(comm::Communicator& comm, const std::exception_ptr& local, std::string_view context);

// The first line where some rank's list differs from rank 0's (a missing line counts), lowest
// index first, then lowest rank; every rank gets the same answer.
struct Difference {
  std::size_t index = 0;
  int rank = 0;
  std::string on_rank_0, on_that_rank;  // "nothing (N lines)" for a missing line
};
std::optional<Difference> first_difference(comm::Communicator& comm, const std::vector<std::string>& lines);

}  // namespace loom::comm
