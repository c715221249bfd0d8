#include "loom/comm/mpi.hpp"

#include <mpi.h>

#include <climits>
#include <memory>
#include <tuple>
#include <cstring>
#include <string>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/call_queue.hpp"
#include "src/comm/checked.hpp"
#include "src/comm/mpi_progress.hpp"
#include "src/comm/reduce.hpp"

namespace loom::comm {

namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: fail(ErrorCategory::invalid_argument, "no MPI datatype for ", dtype);
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    default: return MPI_SUM;  // avg: sum, then divide
  }
}

bool is_16bit(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

void divide(float* values, std::int64_t n, int size) {
  const auto divisor = static_cast<float>(size);
  for (std::int64_t i = 0; i < n; ++i) values[i] /= divisor;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

int mpi_count(const std::string& what, std::int64_t count, const char* unit = "elements") {
  require(count <= INT_MAX, what, ": ", count, " ", unit, " exceed MPI's int count (", INT_MAX, "); split the tensor");
  return static_cast<int>(count);
}

void check_thread_level() {
  int initialized = 0, finalized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  require(initialized && !finalized, "MPI communicator: MPI is not initialized (call loom::init first)");
  int provided = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  require(provided == MPI_THREAD_MULTIPLE, "MPI communicator: MPI was initialized with thread level ", provided,
          "; loom's progress threads need MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
          "): initialize with loom::init or MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const CommOptions& options) : comm_(comm), options_(options) {
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    progress_ = std::make_unique<detail::MpiProgress>(comm_, rank_, size_, options.timeout);
    // The calls bound their own waits (MpiProgress); the watchdog only catches a blocking call
    // (split) that never returns.
    calls_ = std::make_unique<backend::CallQueue>(
        "MPI communicator",
        options.timeout + detail::MpiProgress::answer_grace(options.timeout) + std::chrono::seconds(1));
  }

  ~MpiCommunicator() override {
    calls_.reset();  // runs what is queued (or abandons a stuck call)
    progress_.reset();
    int finalized = 1;
    MPI_Finalized(&finalized);
    // After a timeout, an abandoned call may still be inside MPI with comm_: leave it allocated.
    if (!finalized && !backend::calls_were_abandoned()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend() const override { return "mpi"; }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    const auto [what, seq] = next_call("all_reduce");
    backend::require_reducible(what, input, output, op, 1, Device::cpu());
    const int n = mpi_count(what, input.numel());
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      MPI_Request request = MPI_REQUEST_NULL;
      if (is_16bit(input.dtype())) {
        auto values = std::make_shared<std::vector<float>>(detail::widen_to_f32(input));
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, values->data(), n, MPI_FLOAT, mpi_op(op), comm_, &request), what);
        finish(request, what, seq, values);
        if (op == ReduceOp::avg) divide(values->data(), n, size_);
        detail::narrow_from_f32(values->data(), output);
        return;
      }
      const void* send = input.raw_data() == output.raw_data() ? MPI_IN_PLACE : input.raw_data();
      check_mpi(MPI_Iallreduce(send, output.raw_data(), n, mpi_type(input.dtype()), mpi_op(op), comm_, &request), what);
      finish(request, what, seq, input, output);
      if (op == ReduceOp::avg) divide(output.data<float>(), n, size_);
    });
  }

  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef) override {
    const auto [what, seq] = next_call("reduce");
    backend::require_root(what, root, size_);
    const bool is_root = rank_ == root;
    backend::require_reducible(what, input, is_root ? output : input, op, 1, Device::cpu());
    const int n = mpi_count(what, input.numel());
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      MPI_Request request = MPI_REQUEST_NULL;
      if (is_16bit(input.dtype())) {
        auto values = std::make_shared<std::vector<float>>(detail::widen_to_f32(input));
        check_mpi(MPI_Ireduce(is_root ? MPI_IN_PLACE : values->data(), is_root ? values->data() : nullptr, n, MPI_FLOAT,
                              mpi_op(op), root, comm_, &request),
                  what);
        finish(request, what, seq, values);
        if (!is_root) return;
        if (op == ReduceOp::avg) divide(values->data(), n, size_);
        detail::narrow_from_f32(values->data(), output);
        return;
      }
      const void* send = is_root && input.raw_data() == output.raw_data() ? MPI_IN_PLACE : input.raw_data();
      check_mpi(MPI_Ireduce(send, is_root ? output.raw_data() : nullptr, n, mpi_type(input.dtype()), mpi_op(op), root,
                            comm_, &request),
                what);
      finish(request, what, seq, input, output);
      if (is_root && op == ReduceOp::avg) divide(output.data<float>(), n, size_);
    });
  }

  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    const auto [what, seq] = next_call("reduce_scatter");
    backend::require_reducible(what, input, output, op, size_, Device::cpu());
    const int n = mpi_count(what, output.numel());
    mpi_count(what, input.numel());
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      MPI_Request request = MPI_REQUEST_NULL;
      if (is_16bit(input.dtype())) {
        auto in = std::make_shared<std::vector<float>>(detail::widen_to_f32(input));
        auto out = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n));
        check_mpi(MPI_Ireduce_scatter_block(in->data(), out->data(), n, MPI_FLOAT, mpi_op(op), comm_, &request), what);
        finish(request, what, seq, in, out);
        if (op == ReduceOp::avg) divide(out->data(), n, size_);
        detail::narrow_from_f32(out->data(), output);
        return;
      }
      // MPI forbids aliased buffers; an output inside the input (in place) goes through a copy.
      auto scratch = std::make_shared<std::vector<unsigned char>>(overlaps(input, output) ? output.nbytes() : 0);
      void* out = scratch->empty() ? output.raw_data() : scratch->data();
      check_mpi(MPI_Ireduce_scatter_block(input.raw_data(), out, n, mpi_type(input.dtype()), mpi_op(op), comm_, &request),
                what);
      finish(request, what, seq, input, output, scratch);
      if (!scratch->empty()) std::memcpy(output.raw_data(), scratch->data(), scratch->size());
      if (op == ReduceOp::avg) divide(output.data<float>(), n, size_);
    });
  }

  Work broadcast(const Tensor& tensor, int root, StreamRef) override {
    const auto [what, seq] = next_call("broadcast");
    backend::require_root(what, root, size_);
    backend::require_on_device(what, "tensor", tensor, Device::cpu());
    const int bytes = mpi_count(what, static_cast<std::int64_t>(tensor.nbytes()), "bytes");
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibcast(tensor.raw_data(), bytes, MPI_BYTE, root, comm_, &request), what);
      finish(request, what, seq, tensor);
    });
  }

  Work all_gather(const Tensor& input, const Tensor& output, StreamRef) override {
    const auto [what, seq] = next_call("all_gather");
    backend::require_gatherable(what, input, output, size_, Device::cpu());
    const int bytes = mpi_count(what, static_cast<std::int64_t>(input.nbytes()), "bytes");
    mpi_count(what, static_cast<std::int64_t>(output.nbytes()), "bytes");
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      auto* out = static_cast<unsigned char*>(output.raw_data());
      const bool in_place = input.raw_data() == out + static_cast<std::size_t>(rank_) * input.nbytes();
      auto copy = std::make_shared<std::vector<unsigned char>>();
      const void* send = input.raw_data();
      if (in_place) {
        send = MPI_IN_PLACE;
      } else if (overlaps(input, output)) {
        copy->assign(static_cast<const unsigned char*>(input.raw_data()),
                     static_cast<const unsigned char*>(input.raw_data()) + input.nbytes());
        send = copy->data();
      }
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallgather(send, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm_, &request), what);
      finish(request, what, seq, input, output, copy);
    });
  }

  Work send(const Tensor& tensor, int peer, StreamRef) override {
    const auto [what, seq] = next_call("send", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, Device::cpu());
    const int bytes = mpi_count(what, static_cast<std::int64_t>(tensor.nbytes()), "bytes");
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(tensor.raw_data(), bytes, MPI_BYTE, peer, point_to_point_tag, comm_, &request), what);
      finish(request, what, seq, tensor);
    });
  }

  Work recv(const Tensor& tensor, int peer, StreamRef) override {
    const auto [what, seq] = next_call("recv", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, Device::cpu());
    const int bytes = mpi_count(what, static_cast<std::int64_t>(tensor.nbytes()), "bytes");
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      // The size is checked before receiving: a matched probe, waited for like any call.
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      progress_->wait_for_message(peer, point_to_point_tag, comm_, message, status, what, seq);
      int sent = 0;
      check_mpi(MPI_Get_count(&status, MPI_BYTE, &sent), what);
      if (sent != bytes) {
        std::vector<unsigned char> drained(static_cast<std::size_t>(sent));  // let the sender finish
        check_mpi(MPI_Mrecv(drained.data(), sent, MPI_BYTE, &message, MPI_STATUS_IGNORE), what);
        fail(ErrorCategory::invalid_argument, what, ": rank ", peer, " sent ", sent, " bytes but this recv expects ",
             tensor, " (", tensor.nbytes(), " bytes)");
      }
      check_mpi(MPI_Mrecv(tensor.raw_data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE), what);
    });
  }

  Work barrier(StreamRef) override {
    const auto [what, seq] = next_call("barrier");
    return calls_->enqueue(what, [=, this] {
      progress_->require_not_aborted(what);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibarrier(comm_, &request), what);
      finish(request, what, seq);
    });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    const std::string what = describe("split");
    backend::require_color(what, color);
    // Owned by the call, not this frame: a call abandoned by the watchdog may still write it later.
    auto child = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    calls_->run(what, [=, this] {
      progress_->require_not_aborted(what);
      check_mpi(MPI_Comm_split(comm_, color == no_color ? MPI_UNDEFINED : color, key, child.get()), what);
    });
    if (*child == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(*child, options_);
  }

 private:
  static constexpr int point_to_point_tag = 7;

  std::string describe(const char* op, int peer = -1) const {
    return backend::describe_call("MPI", op, rank_, size_, Device::cpu(), peer);
  }

  // The call's description with its sequence number ("MPI all_reduce #42 (rank 0 of 2)").
  std::pair<std::string, std::int64_t> next_call(const char* op, int peer = -1) {
    const std::int64_t seq = progress_->next_sequence();
    std::string name = op;
    name += " #";
    name += std::to_string(seq);
    return {backend::describe_call("MPI", name, rank_, size_, Device::cpu(), peer), seq};
  }

  // Waits for a request through progress_, keeping `held` (its buffers) alive if it times out.
  template <class... Held>
  void finish(MPI_Request& request, const std::string& what, std::int64_t seq, Held... held) {
    progress_->wait(request, what, seq, std::make_shared<std::tuple<Held...>>(std::move(held)...));
  }

  MPI_Comm comm_;
  CommOptions options_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<detail::MpiProgress> progress_;
  std::unique_ptr<backend::CallQueue> calls_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world_communicator(const CommOptions& options) {
  check_thread_level();
  require(options.timeout.count() > 0, "MPI communicator: the timeout must be positive");
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  std::unique_ptr<Communicator> out = std::make_unique<MpiCommunicator>(comm, options);
  return options.check_collectives ? detail::with_collective_checks(std::move(out)) : std::move(out);
}

bool mpi_built() { return true; }

bool initialize_mpi() {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) return false;
  int provided = MPI_THREAD_SINGLE;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return true;  // the MPI backend checks the thread level it got (the NCCL id broadcast needs none)
}

void finalize_mpi() { check_mpi(MPI_Finalize(), "MPI_Finalize"); }

std::pair<int, int> mpi_world() {
  int rank = 0, size = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  return {rank, size};
}

void mpi_broadcast_bytes(std::span<unsigned char> bytes, int root) {
  check_mpi(MPI_Bcast(bytes.data(), mpi_count("mpi_broadcast_bytes", static_cast<std::int64_t>(bytes.size())), MPI_BYTE,
                      root, MPI_COMM_WORLD),
            "MPI_Bcast");
}

bool mpi_calls_were_abandoned() { return backend::calls_were_abandoned(); }

}  // namespace loom::comm
