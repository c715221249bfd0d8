#include "loom/comm/backend/call_checks.hpp"

#include "loom/core/error.hpp"

namespace loom::comm::backend {

// Appends, not a stream: every call of every backend is described, also the 1-microsecond ones.
std::string describe_call(std::string_view label, std::string_view op, int rank, int size, Device device, int peer) {
  std::string text;
  text.reserve(label.size() + op.size() + 40);
  text.append(label).append(" ").append(op).append(" (rank ").append(std::to_string(rank)).append(" of ");
  text.append(std::to_string(size));
  if (device.is_cuda()) text.append(" on ").append(device.to_string());
  if (peer >= 0) text.append(", peer ").append(std::to_string(peer));
  return text.append(")");
}

void require_on_device(const std::string& what, const char* name, const Tensor& tensor, Device device) {
  require(tensor.defined(), what, ": ", name, " is undefined");
  require(tensor.device() == device, what, ": ", name, " ", tensor, " is not on this communicator's device ", device);
}

void require_same_dtype(const std::string& what, const Tensor& input, const Tensor& output) {
  require(input.dtype() == output.dtype(), what, ": input ", input, " and output ", output, " differ in dtype");
}

void require_root(const std::string& what, int root, int size) {
  require(root >= 0 && root < size, what, ": root ", root, " is outside a world of ", size);
}

void require_color(const std::string& what, int color) {
  require(color >= 0 || color == Communicator::no_color, what, ": color must be >= 0 or no_color, got ", color);
}

void require_split_timeout(const std::string& what, std::optional<std::chrono::milliseconds> timeout) {
  require(!timeout || timeout->count() > 0, what, ": a split communicator's timeout must be positive, got ",
          timeout ? timeout->count() : 0, " ms");
}

void require_peer(const std::string& what, const Tensor& tensor, int peer, int rank, int size, Device device) {
  require_on_device(what, "tensor", tensor, device);
  require(peer >= 0 && peer < size && peer != rank, what, ": peer ", peer, " must be another rank of a world of ", size);
}

void require_gatherable(const std::string& what, const Tensor& input, const Tensor& output, int ranks, Device device) {
  require_on_device(what, "input", input, device);
  require_on_device(what, "output", output, device);
  require_same_dtype(what, input, output);
  require(output.numel() == input.numel() * ranks, what, ": output must be ", ranks, " x the input's ", input.numel(),
          " ", input.dtype(), " elements, got ", output);
}

void require_reducible(const std::string& what, const Tensor& input, const Tensor& output, ReduceOp op,
                       std::int64_t blocks, Device device) {
  require_on_device(what, "input", input, device);
  require_on_device(what, "output", output, device);
  require_same_dtype(what, input, output);
  const DType d = input.dtype();
  require(d == DType::f32 || d == DType::f16 || d == DType::bf16 || d == DType::i32 || d == DType::i64, what,
          ": dtype ", d, " cannot be reduced (f32, f16, bf16, i32, i64)");
  require(input.numel() == blocks * output.numel(), what, ": input has ", input.numel(), " elements, expected ",
          blocks, " x the output's ", output.numel());
  require(op != ReduceOp::avg || is_floating_point(d), what, ": avg needs a floating dtype, got ", d);
}

std::string not_completed_within(std::chrono::milliseconds timeout) {
  return loom::detail::concat("not completed within ", timeout.count(), " ms (a peer did not join, or is stuck)");
}

}  // namespace loom::comm::backend
