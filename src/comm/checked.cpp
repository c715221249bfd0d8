#include "src/comm/checked.hpp"

#include <cstdlib>
#include <optional>
#include <sstream>
#include <vector>

#include "loom/core/error.hpp"

namespace loom::comm {

bool collective_checks_from_environment() {
  const char* value = std::getenv("LOOM_DEBUG_COLLECTIVES");
  return value != nullptr && std::string_view(value) != "" && std::string_view(value) != "0";
}

namespace detail {

namespace {

enum class Call : std::int64_t { all_reduce, reduce, broadcast, all_gather, reduce_scatter, barrier, split, send, recv };

constexpr const char* call_names[] = {"all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
                                      "barrier",    "split",  "send",      "recv"};

// What one rank is about to do. count is the input's element count.
struct Signature {
  Call call;
  std::int64_t count = 0;
  std::int64_t dtype = 0;
  std::int64_t op = -1;    // ReduceOp, or -1
  std::int64_t root = -1;  // root, or -1
  std::int64_t number = 0; // collective calls made before this one

  static constexpr std::int64_t fields = 6;
  std::vector<std::int64_t> encode() const {
    return {static_cast<std::int64_t>(call), count, dtype, op, root, number};
  }
  static Signature decode(const std::int64_t* f) {
    return {static_cast<Call>(f[0]), f[1], f[2], f[3], f[4], f[5]};
  }
  bool operator==(const Signature&) const = default;

  std::string describe() const {
    std::ostringstream out;
    const auto index = static_cast<std::size_t>(call);
    out << "call #" << number << " " << (index < std::size(call_names) ? call_names[index] : "unknown") << "(";
    if (call != Call::barrier && call != Call::split) {
      out << count << " x " << static_cast<DType>(dtype);
      if (op >= 0) out << ", " << to_string(static_cast<ReduceOp>(op));
    }
    if (root >= 0) out << ", root " << root;
    out << ")";
    return out.str();
  }
};

class CheckedCommunicator : public Communicator {
 public:
  explicit CheckedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Device device() const override { return inner_->device(); }
  std::string_view backend() const override { return inner_->backend(); }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream) override {
    check_collective(Call::all_reduce, input, op, -1);
    return inner_->all_reduce(input, output, op, stream);
  }
  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef stream) override {
    check_collective(Call::reduce, input, op, root);
    return inner_->reduce(input, output, op, root, stream);
  }
  Work broadcast(const Tensor& tensor, int root, StreamRef stream) override {
    check_collective(Call::broadcast, tensor, std::nullopt, root);
    return inner_->broadcast(tensor, root, stream);
  }
  Work all_gather(const Tensor& input, const Tensor& output, StreamRef stream) override {
    check_collective(Call::all_gather, input, std::nullopt, -1);
    return inner_->all_gather(input, output, stream);
  }
  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream) override {
    check_collective(Call::reduce_scatter, input, op, -1);
    return inner_->reduce_scatter(input, output, op, stream);
  }
  Work barrier(StreamRef stream) override {
    check({Call::barrier});
    return inner_->barrier(stream);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }
  std::unique_ptr<Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    check({Call::split});  // colors and keys differ between ranks by design
    std::unique_ptr<Communicator> child = inner_->split(color, key, timeout);
    return child ? with_collective_checks(std::move(child)) : nullptr;
  }

  // The sender ships its signature; the receiver compares and answers; both fail on a mismatch.
  Work send(const Tensor& tensor, int peer, StreamRef stream) override {
    const Signature mine{Call::send, tensor.numel(), static_cast<std::int64_t>(tensor.dtype())};
    exchange_with_peer(mine, peer, true);
    return inner_->send(tensor, peer, stream);
  }
  Work recv(const Tensor& tensor, int peer, StreamRef stream) override {
    const Signature mine{Call::recv, tensor.numel(), static_cast<std::int64_t>(tensor.dtype())};
    exchange_with_peer(mine, peer, false);
    return inner_->recv(tensor, peer, stream);
  }

 private:
  void check_collective(Call call, const Tensor& input, std::optional<ReduceOp> op, int root) {
    require(input.defined(), "collective check: the input tensor is undefined");
    check({call, input.numel(), static_cast<std::int64_t>(input.dtype()), op ? static_cast<std::int64_t>(*op) : -1,
           root});
  }

  Tensor on_device(const std::vector<std::int64_t>& values) const {
    return Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}).to(device());
  }

  void check(Signature mine) {
    mine.number = collectives_++;
    const Tensor local = on_device(mine.encode());
    const Tensor all = Tensor::empty({Signature::fields * size()}, DType::i64, device());
    inner_->all_gather(local, all).wait();
    const std::vector<std::int64_t> fields = all.to_vector<std::int64_t>();
    std::vector<Signature> calls;
    bool same = true;
    for (int r = 0; r < size(); ++r) {
      calls.push_back(Signature::decode(fields.data() + static_cast<std::ptrdiff_t>(r) * Signature::fields));
      same = same && calls.back() == calls.front();
    }
    if (same) return;
    // Ranks grouped by the call they make, in order of first appearance.
    std::ostringstream out;
    std::vector<bool> listed(calls.size(), false);
    for (std::size_t r = 0; r < calls.size(); ++r) {
      if (listed[r]) continue;
      std::vector<std::size_t> ranks;
      for (std::size_t q = r; q < calls.size(); ++q) {
        if (!listed[q] && calls[q] == calls[r]) {
          listed[q] = true;
          ranks.push_back(q);
        }
      }
      out << (r == 0 ? "" : "; ") << (ranks.size() == 1 ? "rank " : "ranks ");
      for (std::size_t i = 0; i < ranks.size(); ++i) out << (i == 0 ? "" : ",") << ranks[i];
      out << " called " << calls[r].describe();
    }
    fail(ErrorCategory::invalid_argument, "collective mismatch on the ", backend(), " communicator of ", size(),
         " ranks (LOOM_DEBUG_COLLECTIVES): ", out.str());
  }

  void exchange_with_peer(const Signature& mine, int peer, bool sending) {
    require(peer >= 0 && peer < size() && peer != rank(), sending ? "send" : "recv", ": peer ", peer,
            " must be another rank of a world of ", size());
    const Tensor theirs = Tensor::empty({Signature::fields}, DType::i64, device());
    if (sending) {
      inner_->send(on_device(mine.encode()), peer).wait();
      inner_->recv(theirs, peer).wait();
    } else {
      inner_->recv(theirs, peer).wait();
      inner_->send(on_device(mine.encode()), peer).wait();
    }
    const Signature other = Signature::decode(theirs.to_vector<std::int64_t>().data());
    const Call expected = sending ? Call::recv : Call::send;
    if (other.call == expected && other.count == mine.count && other.dtype == mine.dtype) return;
    const int sender = sending ? rank() : peer, receiver = sending ? peer : rank();
    const Signature& sent = sending ? mine : other;
    const Signature& received = sending ? other : mine;
    fail(ErrorCategory::invalid_argument, "point-to-point mismatch on the ", backend(),
         " communicator (LOOM_DEBUG_COLLECTIVES): rank ", sender, " called send(", sent.count, " x ",
         static_cast<DType>(sent.dtype), ") to rank ", receiver, ", which called ",
         received.call == Call::recv ? "recv" : "send", "(", received.count, " x ", static_cast<DType>(received.dtype),
         ")");
  }

  std::unique_ptr<Communicator> inner_;
  std::int64_t collectives_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> with_collective_checks(std::unique_ptr<Communicator> inner) {
  return std::make_unique<CheckedCommunicator>(std::move(inner));
}

}  // namespace detail
}  // namespace loom::comm
