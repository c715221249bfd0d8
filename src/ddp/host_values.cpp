#include "src/ddp/host_values.hpp"

#include <cstring>

#include "loom/core/tensor.hpp"

namespace loom::ddp::detail {

namespace {
std::vector<std::int64_t> through_device(comm::Communicator& comm, const std::vector<std::int64_t>& values,
                                         bool broadcast, comm::ReduceOp op, int root) {
  const auto count = static_cast<std::int64_t>(values.size());
  const Tensor staged = Tensor::from_vector(values, {count}).to(comm.device());
  if (broadcast) comm.broadcast(staged, root).wait();
  else comm.all_reduce(staged, staged, op).wait();
  return staged.to(Device::cpu()).to_vector<std::int64_t>();
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

}  // namespace loom::ddp::detail
