#include "loom/comm/mpi.hpp"

#include <mpi.h>

#include <charconv>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/mpi_check.hpp"
#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/call_queue.hpp"
#include "src/comm/checked.hpp"
#include "src/comm/cpu_call.hpp"
#include "src/comm/mpi/collectives.hpp"
#include "src/comm/mpi/gate.hpp"
#include "src/comm/mpi/status.hpp"
#include "src/comm/mpi/transfers.hpp"
#include "src/comm/reduce.hpp"

namespace loom::comm {

namespace {

using detail::CollectiveKind;
using detail::CollectiveSignature;

using detail::divide;
using detail::hold;
using detail::is_16bit;
using detail::view_of;

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

CollectiveSignature signature(CollectiveKind kind) { return {kind, -1, -1, -1, 0}; }

// What a communicator's calls use, on whichever thread runs them (one at a time: the CallQueue's).
// The calls hold it by shared_ptr: a call abandoned inside MPI_Comm_split may return after the
// communicator is gone.
struct Engine {
  Engine(MPI_Comm comm, int rank_in, int size_in, std::chrono::milliseconds timeout,
         backend::CallQueue::Handle calls)
      : owned{comm}, collectives{duplicate(comm)}, rank(rank_in), size(size_in),
        status(comm, rank, size, timeout, std::move(calls), "MPI communicator"),
        transfers(status),
        gate(comm, rank, size) {}

  static MPI_Comm duplicate(MPI_Comm comm) {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(comm, &out), "MPI_Comm_dup (collective traffic)");
    check_mpi(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    return out;
  }

  // One call: `body` transfers through `transfers`, so it returns when the communicator is aborted
  // (a timeout names the missing peers). `held` are the call's tensors, kept alive past an
  // abandoned call. An MPI error aborts the communicator and the peers are told.
  template <class Body>
  void run(const std::string& what, std::int64_t sequence, std::int64_t collective, std::shared_ptr<void> held,
           Body&& body) {
    status.begin(sequence, collective, &what);
    transfers.hold(std::move(held));
    try {
      if (status.aborted()) status.throw_aborted(what);
      body(detail::MpiPeers{collectives.value, rank, size, transfers, what});
    } catch (const Error& e) {
      status.end();
      if (e.category() != ErrorCategory::mpi) throw;
      const std::string detail = what + ": " + e.detail();
      status.abort(e.category(), detail);
      throw Error(e.category(), detail);
    }
    transfers.release();
    status.end();
  }

  ~Engine() {
    // An aborted communicator is never freed: its peers' messages may still arrive, and a later
    // communicator given its context id by MPI would receive them.
    const bool keep = status.aborted() || backend::calls_were_abandoned();
    owned.keep = collectives.keep = keep;
    if (keep) gate.keep_communicator();
  }

  // Freed last, after the status channel and the gate.
  struct OwnedComm {
    MPI_Comm value;
    bool keep = false;
    ~OwnedComm() {
      int finalized = 1;
      MPI_Finalized(&finalized);
      if (!finalized && !keep) MPI_Comm_free(&value);
    }
  } owned, collectives;
  int rank, size;
  detail::MpiStatus status;
  detail::MpiTransfers transfers;
  detail::MpiGate gate;
};


class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const CommOptions& options) : options_(options) {
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
    // No CallQueue watchdog: the engine's status thread watches the calls and names the peers.
    // Inline: no call blocks inside MPI (but split, which the gate guards), so the thread that
    // waits for a call may run it, sparing small calls two thread hand-offs.
    calls_ = std::make_unique<backend::CallQueue>("MPI communicator", std::chrono::milliseconds(0), true);
    engine_ = std::make_shared<Engine>(comm, rank_, size_, options.timeout, calls_->handle());
  }

  ~MpiCommunicator() override {
    calls_.reset();  // runs what is queued (a stuck call is failed by the status thread, then abandoned)
    engine_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend() const override { return "mpi"; }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    std::string what = next_call("all_reduce");
    backend::require_reducible(what, input, output, op, 1, Device::cpu());
    mpi_count(what, input.numel());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output), op](
                                                                const detail::MpiPeers& peers) {
      if (is_16bit(in.dtype)) {
        float* values = peers.transfers.scratch<float>(detail::MpiTransfers::staging_slot, static_cast<std::size_t>(in.numel));
        detail::widen_to_f32(in.data, in.dtype, in.numel, values);
        detail::all_reduce(peers, values, values, in.numel, DType::f32, op);
        if (op == ReduceOp::avg) divide(values, in.numel, peers.size);
        detail::narrow_from_f32(values, out.data, out.dtype, out.numel);
        return;
      }
      detail::all_reduce(peers, in.data, out.data, in.numel, in.dtype, op);
      if (op == ReduceOp::avg) divide(static_cast<float*>(out.data), in.numel, peers.size);
    });
  }

  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef) override {
    std::string what = next_call("reduce");
    backend::require_root(what, root, size_);
    const bool is_root = rank_ == root;
    backend::require_reducible(what, input, is_root ? output : input, op, 1, Device::cpu());
    mpi_count(what, input.numel());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output), op, root,
                                                             is_root](const detail::MpiPeers& peers) {
      if (is_16bit(in.dtype)) {
        float* values = peers.transfers.scratch<float>(detail::MpiTransfers::staging_slot, static_cast<std::size_t>(in.numel));
        detail::widen_to_f32(in.data, in.dtype, in.numel, values);
        detail::reduce(peers, values, values, in.numel, DType::f32, op, root);
        if (!is_root) return;
        if (op == ReduceOp::avg) divide(values, in.numel, peers.size);
        detail::narrow_from_f32(values, out.data, out.dtype, out.numel);
        return;
      }
      detail::reduce(peers, in.data, is_root ? out.data : nullptr, in.numel, in.dtype, op, root);
      if (is_root && op == ReduceOp::avg) divide(static_cast<float*>(out.data), in.numel, peers.size);
    });
  }

  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    std::string what = next_call("reduce_scatter");
    backend::require_reducible(what, input, output, op, size_, Device::cpu());
    mpi_count(what, output.numel());
    mpi_count(what, input.numel());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output), op](
                                                                const detail::MpiPeers& peers) {
      const std::int64_t n = out.numel;
      if (is_16bit(in.dtype)) {
        float* values = peers.transfers.scratch<float>(detail::MpiTransfers::staging_slot, static_cast<std::size_t>(in.numel));
        detail::widen_to_f32(in.data, in.dtype, in.numel, values);
        float* mine = values + static_cast<std::size_t>(peers.rank) * static_cast<std::size_t>(n);
        detail::reduce_scatter(peers, values, mine, n, DType::f32, op);
        if (op == ReduceOp::avg) divide(mine, n, peers.size);
        detail::narrow_from_f32(mine, out.data, out.dtype, n);
        return;
      }
      // In place is this rank's block of the input; any other overlap goes through a copy.
      const auto* input_bytes = static_cast<const unsigned char*>(in.data);
      const auto* output_bytes = static_cast<const unsigned char*>(out.data);
      const bool in_place = output_bytes == input_bytes + static_cast<std::size_t>(peers.rank) * out.nbytes;
      const bool overlap = out.nbytes > 0 && output_bytes < input_bytes + in.nbytes &&
                           input_bytes < output_bytes + out.nbytes;
      if (!in_place && overlap) {
        auto* result = peers.transfers.scratch<unsigned char>(detail::MpiTransfers::staging_slot, out.nbytes);
        detail::reduce_scatter(peers, in.data, result, n, in.dtype, op);
        std::memcpy(out.data, result, out.nbytes);
      } else {
        detail::reduce_scatter(peers, in.data, out.data, n, in.dtype, op);
      }
      if (op == ReduceOp::avg) divide(static_cast<float*>(out.data), n, peers.size);
    });
  }

  Work broadcast(const Tensor& tensor, int root, StreamRef) override {
    std::string what = next_call("broadcast");
    backend::require_root(what, root, size_);
    backend::require_on_device(what, "tensor", tensor, Device::cpu());
    mpi_count(what, static_cast<std::int64_t>(tensor.nbytes()), "bytes");
    return collective(std::move(what), hold(tensor), [t = view_of(tensor), root](const detail::MpiPeers& peers) {
      detail::broadcast(peers, t.data, static_cast<std::int64_t>(t.nbytes), root);
    });
  }

  Work all_gather(const Tensor& input, const Tensor& output, StreamRef) override {
    std::string what = next_call("all_gather");
    backend::require_gatherable(what, input, output, size_, Device::cpu());
    mpi_count(what, static_cast<std::int64_t>(input.nbytes()), "bytes");
    mpi_count(what, static_cast<std::int64_t>(output.nbytes()), "bytes");
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output)](
                                                                const detail::MpiPeers& peers) {
      detail::all_gather(peers, in.data, out.data, static_cast<std::int64_t>(in.nbytes));
    });
  }

  Work send(const Tensor& tensor, int peer, StreamRef) override {
    std::string what = next_call("send", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, Device::cpu());
    const int bytes = mpi_count(what, static_cast<std::int64_t>(tensor.nbytes()), "bytes");
    return point_to_point(std::move(what), hold(tensor), [data = tensor.raw_data(), bytes, peer](
                                                             const detail::MpiPeers& peers, MPI_Comm comm) {
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(data, bytes, MPI_BYTE, peer, point_to_point_tag, comm, &request), peers.what);
      peers.transfers.wait_all(std::span<MPI_Request>(&request, 1), peers.what);
    });
  }

  Work recv(const Tensor& tensor, int peer, StreamRef) override {
    std::string what = next_call("recv", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, Device::cpu());
    const int bytes = mpi_count(what, static_cast<std::int64_t>(tensor.nbytes()), "bytes");
    return point_to_point(std::move(what), hold(tensor), [tensor, bytes, peer](const detail::MpiPeers& peers,
                                                                                MPI_Comm comm) {
      // The size is checked before receiving: a matched probe, waited for like any transfer.
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      peers.transfers.wait_for_message(peer, point_to_point_tag, comm, message, status, peers.what);
      int sent = 0;
      check_mpi(MPI_Get_count(&status, MPI_BYTE, &sent), peers.what);
      if (sent != bytes) {
        std::vector<unsigned char> drained(static_cast<std::size_t>(sent));  // let the sender finish
        check_mpi(MPI_Mrecv(drained.data(), sent, MPI_BYTE, &message, MPI_STATUS_IGNORE), peers.what);
        fail(ErrorCategory::invalid_argument, peers.what, ": rank ", peer, " sent ", sent,
             " bytes but this recv expects ", tensor, " (", tensor.nbytes(), " bytes)");
      }
      check_mpi(MPI_Mrecv(tensor.raw_data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE), peers.what);
    });
  }

  // The arrival gate is a barrier, which also checks that every rank is at the same collective.
  Work barrier(StreamRef) override {
    return collective(next_call("barrier"), nullptr, [index = collectives_ + 1, e = engine_.get()](
                                                         const detail::MpiPeers& peers) {
      e->gate.pass(index, signature(CollectiveKind::barrier), e->status, peers.transfers, peers.what);
    });
  }

  void abort(const std::string& reason) override {
    if (engine_->status.aborted()) return;  // by a peer's notice or a timeout: the peers know
    engine_->status.abort(ErrorCategory::aborted, loom::detail::concat("rank ", rank_, ": ", reason));
    engine_->status.wait_until_told(std::chrono::seconds(1));  // the notices leave before this process may
  }

  std::unique_ptr<Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    std::string what = next_call("split");
    backend::require_color(what, color);
    backend::require_split_timeout(what, timeout);
    // Owned by the call, not this frame: a call abandoned inside MPI may still write it later.
    auto child = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    // MPI_Comm_split blocks: it starts only once the gate has seen every rank arrive, so a rank
    // that never comes leaves the others waiting in the gate, not spinning inside MPI.
    collective(std::move(what), child, [=, index = collectives_ + 1, e = engine_.get()](const detail::MpiPeers& peers) {
      e->gate.pass(index, signature(CollectiveKind::split), e->status, peers.transfers, peers.what);
      e->status.transferring();
      check_mpi(MPI_Comm_split(e->owned.value, color == no_color ? MPI_UNDEFINED : color, key, child.get()),
                "MPI_Comm_split");
    }).wait();
    if (*child == MPI_COMM_NULL) return nullptr;
    CommOptions options = options_;
    if (timeout) options.timeout = *timeout;
    return std::make_unique<MpiCommunicator>(*child, options);
  }

 private:
  static constexpr int point_to_point_tag = 7;

  // The call's description with its sequence number ("MPI all_reduce #42 (rank 0 of 2)").
  std::string next_call(const char* op, int peer = -1) {
    ++sequence_;
    // Every call is described, so without printf (a third of a small call's own cost) or a string
    // of its own for the op and its number.
    char name[48];
    const std::size_t op_length = std::strlen(op);
    std::memcpy(name, op, op_length);
    name[op_length] = ' ';
    name[op_length + 1] = '#';
    const auto end = std::to_chars(name + op_length + 2, name + sizeof name, sequence_).ptr;
    return backend::describe_call("MPI", std::string_view(name, static_cast<std::size_t>(end - name)), rank_, size_,
                                  Device::cpu(), peer);
  }

  // Queues collective number ++collectives_: calls run in the order they are queued, so every
  // rank's n-th collective meets the others' n-th.
  template <class Body>
  Work collective(std::string what, std::shared_ptr<void> held, Body body) {
    const std::int64_t sequence = sequence_, index = ++collectives_;
    return calls_->enqueue_named(std::move(what), [sequence, index, held = std::move(held), body = std::move(body),
                                                   engine = engine_](const std::string& call) mutable {
      engine->run(call, sequence, index, std::move(held), body);
    });
  }

  template <class Body>
  Work point_to_point(std::string what, std::shared_ptr<void> held, Body body) {
    const std::int64_t sequence = sequence_;
    return calls_->enqueue_named(std::move(what), [sequence, held = std::move(held), body = std::move(body),
                                                   engine = engine_](const std::string& call) mutable {
      engine->run(call, sequence, 0, std::move(held),
                  [&](const detail::MpiPeers& peers) { body(peers, engine->owned.value); });
    });
  }

  CommOptions options_;
  int rank_ = 0, size_ = 1;
  std::int64_t sequence_ = 0;     // calls made (their numbers in messages)
  std::int64_t collectives_ = 0;  // collective calls made
  std::unique_ptr<backend::CallQueue> calls_;
  std::shared_ptr<Engine> engine_;
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

bool mpi_communicator_aborted() { return detail::any_communicator_aborted(); }

}  // namespace loom::comm
