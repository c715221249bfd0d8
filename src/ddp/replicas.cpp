#include "loom/ddp/replicas.hpp"

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "src/ddp/host_values.hpp"

namespace loom::ddp {

namespace {

std::string describe(const nn::Parameter& p) {
  std::ostringstream out;
  out << "'" << p.name() << "' " << p.value().shape() << " " << p.value().dtype();
  return out.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

void verify_same_parameters(comm::Communicator& comm, std::span<nn::Parameter* const> parameters) {
  std::vector<std::string> mine;
  std::string joined;
  for (const nn::Parameter* p : parameters) {
    mine.push_back(describe(*p));
    joined += mine.back() + "\n";
  }
  const std::vector<std::string> reference = split_lines(detail::broadcast_text(comm, joined, 0));
  // The first index where this rank differs from rank 0 (a missing parameter counts).
  const std::size_t longest = std::max(reference.size(), mine.size());
  std::size_t first = longest;
  for (std::size_t i = 0; i < longest; ++i) {
    if (i >= reference.size() || i >= mine.size() || reference[i] != mine[i]) {
      first = i;
      break;
    }
  }
  // The lowest differing index over all ranks, and the lowest rank that differs there.
  const auto size = static_cast<std::int64_t>(comm.size());
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const std::int64_t key = first == longest ? none : static_cast<std::int64_t>(first) * size + comm.rank();
  const std::int64_t lowest = detail::all_reduce_value(comm, key, comm::ReduceOp::min);
  if (lowest == none) return;
  const auto index = static_cast<std::size_t>(lowest / size);
  const int other = static_cast<int>(lowest % size);
  auto at = [](const std::vector<std::string>& list, std::size_t i) {
    return i < list.size() ? list[i] : std::string("nothing (it has ") + std::to_string(list.size()) + " parameters)";
  };
  const std::string theirs = detail::broadcast_text(comm, at(mine, index), other);
  throw Error(ErrorCategory::invalid_argument,
              loom::detail::concat("data-parallel replicas differ: parameter #", index, " is ", at(reference, index),
                                   " on rank 0 but ", theirs, " on rank ", other, " (of ", comm.size(),
                                   "); every rank must build the same model"),
              comm.rank());
}

void broadcast_parameters(comm::Communicator& comm, std::span<nn::Parameter* const> parameters, int root) {
  std::vector<comm::Work> works;
  works.reserve(parameters.size());
  for (nn::Parameter* p : parameters) works.push_back(comm.broadcast(p->value(), root));
  for (const comm::Work& work : works) work.wait();
}

double mean_across_ranks(comm::Communicator& comm, double value) {
  const Tensor staged = from_doubles(std::span<const double>(&value, 1), DType::f32, comm.device());
  comm.all_reduce(staged, staged, comm::ReduceOp::avg).wait();
  return to_doubles(staged).front();
}

}  // namespace loom::ddp
