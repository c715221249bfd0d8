#include "loom/comm/agreement.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>

#include "loom/core/error.hpp"
#include "loom/core/tensor.hpp"

namespace loom::comm {

namespace {

std::vector<std::int64_t> through_device(comm::Communicator& comm, const std::vector<std::int64_t>& values,
                                         bool broadcast, comm::ReduceOp op, int root) {
  const auto count = static_cast<std::int64_t>(values.size());
  const Tensor staged = Tensor::from_vector(values, {count}).to(comm.device());
  if (broadcast) comm.broadcast(staged, root).wait();
  else comm.all_reduce(staged, staged, op).wait();
  return staged.to(Device::cpu()).to_vector<std::int64_t>();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::int64_t all_reduce_value(comm::Communicator& comm, std::int64_t value, comm::ReduceOp op) {
  return through_device(comm, {value}, false, op, 0).front();
}

std::vector<std::int64_t> all_reduce_values(comm::Communicator& comm, const std::vector<std::int64_t>& values,
                                            comm::ReduceOp op) {
  return values.empty() ? values : through_device(comm, values, false, op, 0);
}

std::vector<std::int64_t> broadcast_values(comm::Communicator& comm, std::vector<std::int64_t> values, int root) {
  const std::int64_t count =
      through_device(comm, {static_cast<std::int64_t>(values.size())}, true, comm::ReduceOp::sum, root).front();
  values.resize(static_cast<std::size_t>(count));
  return count == 0 ? values : through_device(comm, values, true, comm::ReduceOp::sum, root);
}

std::string broadcast_text(comm::Communicator& comm, const std::string& text, int root) {
  // 8 bytes per element; the length travels first so every rank sizes its buffer alike.
  std::vector<std::int64_t> packed((text.size() + 7) / 8, 0);
  std::memcpy(packed.data(), text.data(), text.size());
  const std::int64_t length =
      through_device(comm, {static_cast<std::int64_t>(text.size())}, true, comm::ReduceOp::sum, root).front();
  packed.resize(static_cast<std::size_t>((length + 7) / 8));
  if (!packed.empty()) packed = through_device(comm, packed, true, comm::ReduceOp::sum, root);
  std::string out(static_cast<std::size_t>(length), '\0');
  std::memcpy(out.data(), packed.data(), out.size());
  return out;
}

std::vector<float> all_gather_values(comm::Communicator& comm, const std::vector<float>& mine) {
  const auto n = static_cast<std::int64_t>(mine.size());
  const Tensor input = Tensor::from_vector(mine, {n}).to(comm.device());
  const Tensor output = Tensor::empty({n * comm.size()}, DType::f32, comm.device());
  comm.all_gather(input, output).wait();
  return output.to(Device::cpu()).to_vector<float>();
}

std::vector<std::string> all_gather_texts(comm::Communicator& comm, const std::string& mine) {
  auto gather = [&](const std::vector<std::int64_t>& words) {
    const auto n = static_cast<std::int64_t>(words.size());
    const Tensor input = Tensor::from_vector(words, {n}).to(comm.device());
    const Tensor output = Tensor::empty({n * comm.size()}, DType::i64, comm.device());
    comm.all_gather(input, output).wait();
    return output.to(Device::cpu()).to_vector<std::int64_t>();
  };
  // Lengths first, then every text padded to the longest.
  const std::vector<std::int64_t> lengths = gather({static_cast<std::int64_t>(mine.size())});
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const auto words = static_cast<std::size_t>((longest + 7) / 8 + 1);
  std::vector<std::int64_t> packed(words, 0);
  std::memcpy(packed.data(), mine.data(), mine.size());
  const std::vector<std::int64_t> all = gather(packed);
  std::vector<std::string> texts;
  for (int r = 0; r < comm.size(); ++r) {
    const char* start = reinterpret_cast<const char*>(all.data() + static_cast<std::size_t>(r) * words);
    texts.emplace_back(start, static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
  }
  return texts;
}

void throw_failure_of(comm::Communicator& comm, int lowest_failed, const std::exception_ptr& local,
                      std::string_view context) {
  std::string what = "unknown error";
  ErrorCategory category = ErrorCategory::invalid_argument;
  if (local) {
    try {
      std::rethrow_exception(local);
    } catch (const Error& e) {
      what = e.detail();
      category = e.category();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
  }
  std::vector<std::int64_t> shared_category;
  std::string shared_what;
  try {
    shared_category = broadcast_values(comm, {static_cast<std::int64_t>(category)}, lowest_failed);
    shared_what = broadcast_text(comm, what, lowest_failed);
  } catch (...) {
    if (local) std::rethrow_exception(local);  // the communicator is broken too: the cause matters more
    throw;
  }
  if (local) std::rethrow_exception(local);
  throw Error(static_cast<ErrorCategory>(shared_category.front()),
              loom::detail::concat(context, ": rank ", lowest_failed, " failed: ", shared_what), comm.rank());
}

void throw_if_any_failed(comm::Communicator& comm, const std::exception_ptr& local, std::string_view context) {
  const std::int64_t lowest = all_reduce_value(comm, local ? comm.rank() : comm.size(), comm::ReduceOp::min);
  if (lowest < comm.size()) throw_failure_of(comm, static_cast<int>(lowest), local, context);
}

std::optional<Difference> first_difference(comm::Communicator& comm, const std::vector<std::string>& lines) {
  std::string joined;
  for (const std::string& line : lines) joined += line + "\n";
  const std::vector<std::string> reference = split_lines(broadcast_text(comm, joined, 0));
  const std::size_t longest = std::max(reference.size(), lines.size());
  std::size_t first = longest;
  for (std::size_t i = 0; i < longest && first == longest; ++i) {
    if (i >= reference.size() || i >= lines.size() || reference[i] != lines[i]) first = i;
  }
  const auto size = static_cast<std::int64_t>(comm.size());
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const std::int64_t key = first == longest ? none : static_cast<std::int64_t>(first) * size + comm.rank();
  const std::int64_t lowest = all_reduce_value(comm, key, comm::ReduceOp::min);
  if (lowest == none) return std::nullopt;
  auto at = [](const std::vector<std::string>& list, std::size_t i) {
    return i < list.size() ? list[i] : "nothing (" + std::to_string(list.size()) + " lines)";
  };
  Difference d;
  d.index = static_cast<std::size_t>(lowest / size);
  d.rank = static_cast<int>(lowest % size);
  d.on_rank_0 = at(reference, d.index);
  d.on_that_rank = broadcast_text(comm, at(lines, d.index), d.rank);
  return d;
}

}  // namespace loom::comm
