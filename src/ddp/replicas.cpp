#include "loom/ddp/replicas.hpp"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/comm/agreement.hpp"

namespace loom::ddp {

namespace {

std::string describe(const model::Parameter& p) {
  std::ostringstream out;
  out << "'" << p.name() << "' " << p.shape() << " " << p.dtype();
  return out.str();
}

// FNV-1a over the bytes: not cryptographic, only a change detector for replicas that should be
// bit-identical.
std::uint64_t checksum(std::span<const unsigned char> bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

std::string hex(std::uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

}  // namespace

void verify_same_values(comm::Communicator& comm, const model::ParameterSpace& space) {
  std::exception_ptr invalid;
  std::vector<std::string> mine;
  try {
    require(space.value_mode() == model::ValueMode::full, "verify_same_values: the model's values are sharded "
            "(ZeRO-3): each rank holds other slices, so there are no replicas to compare");
    const Tensor values = space.values().device().is_cpu() ? space.values() : space.values().to(Device::cpu());
    const auto* bytes = static_cast<const unsigned char*>(values.raw_data());
    const std::size_t element = values.element_size();
    for (const model::Slot& slot : space.slots()) {
      const std::span<const unsigned char> part(bytes + static_cast<std::size_t>(slot.offset) * element,
                                                static_cast<std::size_t>(slot.numel) * element);
      mine.push_back("'" + slot.parameter->name() + "' (values checksum " + hex(checksum(part)) + ")");
    }
  } catch (...) {
    invalid = std::current_exception();
  }
  comm::throw_if_any_failed(comm, invalid, "verify_same_values");
  const auto difference = comm::first_difference(comm, mine);
  if (!difference) return;
  throw Error(ErrorCategory::invalid_argument,
              loom::detail::concat("data-parallel replicas have diverged: parameter #", difference->index, " is ",
                                   difference->on_rank_0, " on rank 0 but ", difference->on_that_rank, " on rank ",
                                   difference->rank, " (of ", comm.size(), "); every rank must hold the same values"),
              comm.rank());
}

void verify_same_parameter_shapes(comm::Communicator& comm, std::span<model::Parameter* const> parameters) {
  std::vector<std::string> mine;
  for (const model::Parameter* p : parameters) mine.push_back(describe(*p));
  const auto difference = comm::first_difference(comm, mine);
  if (!difference) return;
  auto named = [](const std::string& line) {
    return line.starts_with("nothing (") ? line.substr(0, line.size() - 7) + " parameters)" : line;
  };
  throw Error(ErrorCategory::invalid_argument,
              loom::detail::concat("data-parallel replicas differ: parameter #", difference->index, " is ",
                                   named(difference->on_rank_0), " on rank 0 but ", named(difference->on_that_rank),
                                   " on rank ", difference->rank, " (of ", comm.size(),
                                   "); every rank must build the same model"),
              comm.rank());
}

void make_replicas(comm::Communicator& comm, model::ParameterSpace& space, std::exception_ptr invalid,
                   std::string_view who, const std::string& settings, bool broadcast) {
  try {
    if (!invalid) space.repartition(comm.size());
  } catch (...) {
    invalid = std::current_exception();
  }
  comm::throw_if_any_failed(comm, invalid, who);
  verify_same_parameter_shapes(comm, space.parameters());
  if (const auto d = comm::first_difference(comm, {settings, space.describe()})) {
    fail(ErrorCategory::invalid_argument, who, ": ", d->index == 0 ? "the options" : "the parameter spaces",
         " differ across ranks: rank 0 has ", d->on_rank_0, " but rank ", d->rank, " has ", d->on_that_rank);
  }
  // Sharded values (a model built in ZeRO-3's layout) have no replicas to broadcast: each rank
  // made its own slices, with the bits one process makes (model/init.hpp), from the seed, which
  // therefore must be the same everywhere.
  if (space.value_mode() == model::ValueMode::sharded) {
    // (Every rank is sharded here: the layouts compared above include the value mode.)
    if (const auto d = comm::first_difference(comm, {space.value_origin()})) {
      fail(ErrorCategory::invalid_argument, who, ": the model's values are sharded, each rank holding its own slices, "
           "but they were ", d->on_rank_0, " on rank 0 and ", d->on_that_rank, " on rank ", d->rank, "; every rank "
           "must build the model with the same seed");
    }
    require(!space.value_origin().empty(), who, ": the model's values are sharded, each rank holding its own slices, "
            "but not from a seed (ParameterSpace::initialize) that would make them one model; build it from "
            "parameter descriptions and initialise it, or build it whole and let the engine shard it");
    return;
  }
  if (!broadcast) return;
  // In pieces: MPI counts elements in an int, and a model's values can pass 2^31.
  constexpr std::int64_t piece = std::int64_t{1} << 30;
  const Tensor& values = space.values();
  std::vector<comm::Work> works;
  for (std::int64_t begin = 0; begin < values.numel(); begin += piece) {
    works.push_back(comm.broadcast(values.slice(begin, std::min(values.numel(), begin + piece)), 0));
  }
  for (const comm::Work& work : works) work.wait();
  space.set_value_origin("broadcast from rank 0");
}

void broadcast_parameters(comm::Communicator& comm, std::span<model::Parameter* const> parameters, int root) {
  std::vector<comm::Work> works;
  works.reserve(parameters.size());
  for (model::Parameter* p : parameters) works.push_back(comm.broadcast(p->value(), root));
  for (const comm::Work& work : works) work.wait();
}

void verify_same_value(comm::Communicator& comm, std::int64_t value, std::string_view what) {
  const std::vector<std::int64_t> extremes = comm::all_reduce_values(comm, {value, -value}, comm::ReduceOp::max);
  const std::int64_t highest = extremes[0], lowest = -extremes[1];
  if (highest == lowest) return;
  throw Error(ErrorCategory::invalid_argument,
              loom::detail::concat(what, " differs across the ", comm.size(), " ranks: from ", lowest, " to ", highest,
                                   " (this rank: ", value, ")"),
              comm.rank());
}

double mean_across_ranks(comm::Communicator& comm, double value) {
  const Tensor staged = from_doubles(std::span<const double>(&value, 1), DType::f32, comm.device());
  comm.all_reduce(staged, staged, comm::ReduceOp::avg).wait();
  return to_doubles(staged).front();
}

}  // namespace loom::ddp
