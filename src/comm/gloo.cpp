#include "loom/comm/gloo.hpp"

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <tuple>

#include "loom/comm/agreement.hpp"
#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/error.hpp"
#include "src/comm/checked.hpp"
#include "src/comm/cpu_call.hpp"
#include "src/comm/gloo/bootstrap.hpp"
#include "src/comm/gloo/collectives.hpp"
#include "src/comm/gloo/link.hpp"
#include "src/comm/reduce.hpp"

namespace loom::comm {

namespace {

using detail::GlooCall;

using detail::divide;
using detail::hold;
using detail::is_16bit;
using detail::view_of;


// What a communicator's calls use on its worker thread. Held by the calls, which may outlive the
// communicator's front end by a moment.
struct Engine {
  Engine(std::shared_ptr<gloo::transport::Device> device_in, std::shared_ptr<gloo::transport::Context> transport,
         std::chrono::milliseconds timeout, backend::CallQueue::Handle calls)
      : device(std::move(device_in)), link(std::move(transport), timeout, std::move(calls), "Gloo communicator") {}

  template <class Body>
  void run(const std::string& what, std::int64_t collective, std::shared_ptr<void> held, Body&& body) {
    link.begin(&what);
    link.hold(std::move(held));
    try {
      if (link.aborted()) link.throw_aborted();
      body(GlooCall{link, scratch, collective, what});
      // Its deadline passed as it finished (in the last combine): the peers were told that this call
      // failed, and it fails here too. An abort from elsewhere after its last transfer does not
      // undo it (a peer that finished the call and then aborted, as under MPI).
      if (link.call_timed_out()) link.throw_aborted();
    } catch (const Error& e) {
      // A failure on this rank alone would leave the peers waiting: they are told. A refused
      // argument (a recv of the wrong size, drained) leaves every rank where it should be.
      if (e.category() != ErrorCategory::invalid_argument && !link.aborted()) link.abort(e.category(), e.what());
      link.end();
      throw;
    } catch (const std::exception& e) {
      const std::string reason = what + ": " + e.what();
      link.abort(ErrorCategory::io, reason);
      link.end();
      throw Error(ErrorCategory::io, reason);
    }
    link.end();
  }

  std::shared_ptr<gloo::transport::Device> device;
  detail::GlooLink link;
  detail::GlooScratch scratch;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::transport::Context> transport,
                   const CommOptions& options)
      : options_(options), rank_(transport->rank), size_(transport->size) {
    // No CallQueue watchdog: the link watches the running call and names the peer it waits for.
    // Inline: the thread that waits for a call runs it (no call blocks past its deadline), which
    // spares a small call two thread hand-offs: 44 us against 370-780 us for 1 KiB on 2 cores.
    calls_ = std::make_unique<backend::CallQueue>("Gloo communicator", std::chrono::milliseconds(0), true);
    engine_ = std::make_shared<Engine>(std::move(device), std::move(transport), options.timeout, calls_->handle());
  }

  ~GlooCommunicator() override {
    calls_.reset();  // runs what is queued (a stuck call ends at its deadline)
    engine_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend() const override { return "gloo"; }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    std::string what = next_call("all_reduce");
    backend::require_reducible(what, input, output, op, 1, Device::cpu());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output), op](
                                                                const GlooCall& call) {
      if (is_16bit(in.dtype)) {
        auto* values = static_cast<float*>(call.scratch.get(call.link, 2, static_cast<std::size_t>(in.numel) * 4));
        detail::widen_to_f32(in.data, in.dtype, in.numel, values);
        detail::gloo_all_reduce(call, values, values, in.numel, DType::f32, op);
        if (op == ReduceOp::avg) divide(values, in.numel, call.link.size());
        detail::narrow_from_f32(values, out.data, out.dtype, out.numel);
        return;
      }
      detail::gloo_all_reduce(call, in.data, out.data, in.numel, in.dtype, op);
      if (op == ReduceOp::avg) divide(static_cast<float*>(out.data), in.numel, call.link.size());
    });
  }

  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef) override {
    std::string what = next_call("reduce");
    backend::require_root(what, root, size_);
    const bool is_root = rank_ == root;
    backend::require_reducible(what, input, is_root ? output : input, op, 1, Device::cpu());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output), op, root,
                                                             is_root](const GlooCall& call) {
      if (is_16bit(in.dtype)) {
        auto* values = static_cast<float*>(call.scratch.get(call.link, 2, static_cast<std::size_t>(in.numel) * 4));
        detail::widen_to_f32(in.data, in.dtype, in.numel, values);
        detail::gloo_reduce(call, values, values, in.numel, DType::f32, op, root);
        if (!is_root) return;
        if (op == ReduceOp::avg) divide(values, in.numel, call.link.size());
        detail::narrow_from_f32(values, out.data, out.dtype, out.numel);
        return;
      }
      detail::gloo_reduce(call, in.data, is_root ? out.data : nullptr, in.numel, in.dtype, op, root);
      if (is_root && op == ReduceOp::avg) divide(static_cast<float*>(out.data), in.numel, call.link.size());
    });
  }

  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef) override {
    std::string what = next_call("reduce_scatter");
    backend::require_reducible(what, input, output, op, size_, Device::cpu());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output), op](
                                                                const GlooCall& call) {
      const std::int64_t n = out.numel;
      const int me = call.link.rank();
      if (is_16bit(in.dtype)) {
        auto* values = static_cast<float*>(call.scratch.get(call.link, 2, static_cast<std::size_t>(in.numel) * 4));
        detail::widen_to_f32(in.data, in.dtype, in.numel, values);
        float* mine = values + static_cast<std::size_t>(me) * static_cast<std::size_t>(n);
        detail::gloo_reduce_scatter(call, values, mine, n, DType::f32, op);
        if (op == ReduceOp::avg) divide(mine, n, call.link.size());
        detail::narrow_from_f32(mine, out.data, out.dtype, n);
        return;
      }
      // In place is this rank's block of the input; any other overlap goes through a copy.
      const auto* input_bytes = static_cast<const unsigned char*>(in.data);
      const auto* output_bytes = static_cast<const unsigned char*>(out.data);
      const bool in_place = output_bytes == input_bytes + static_cast<std::size_t>(me) * out.nbytes;
      const bool overlap = out.nbytes > 0 && output_bytes < input_bytes + in.nbytes &&
                           input_bytes < output_bytes + out.nbytes;
      if (!in_place && overlap) {
        void* result = call.scratch.get(call.link, 2, out.nbytes);
        detail::gloo_reduce_scatter(call, in.data, result, n, in.dtype, op);
        std::memcpy(out.data, result, out.nbytes);
      } else {
        detail::gloo_reduce_scatter(call, in.data, out.data, n, in.dtype, op);
      }
      if (op == ReduceOp::avg) divide(static_cast<float*>(out.data), n, call.link.size());
    });
  }

  Work broadcast(const Tensor& tensor, int root, StreamRef) override {
    std::string what = next_call("broadcast");
    backend::require_root(what, root, size_);
    backend::require_on_device(what, "tensor", tensor, Device::cpu());
    return collective(std::move(what), hold(tensor), [t = view_of(tensor), root](const GlooCall& call) {
      detail::gloo_broadcast(call, t.data, t.nbytes, root);
    });
  }

  Work all_gather(const Tensor& input, const Tensor& output, StreamRef) override {
    std::string what = next_call("all_gather");
    backend::require_gatherable(what, input, output, size_, Device::cpu());
    return collective(std::move(what), hold(input, output), [in = view_of(input), out = view_of(output)](
                                                                const GlooCall& call) {
      // An input that overlaps the output elsewhere than this rank's block is copied first.
      const auto* input_bytes = static_cast<const unsigned char*>(in.data);
      auto* output_bytes = static_cast<unsigned char*>(out.data);
      const bool in_place = input_bytes == output_bytes + static_cast<std::size_t>(call.link.rank()) * in.nbytes;
      const bool overlap = in.nbytes > 0 && input_bytes < output_bytes + out.nbytes &&
                           output_bytes < input_bytes + in.nbytes;
      const void* source = in.data;
      if (!in_place && overlap) {
        void* copy = call.scratch.get(call.link, 2, in.nbytes);
        std::memcpy(copy, in.data, in.nbytes);
        source = copy;
      }
      detail::gloo_all_gather(call, source, out.data, in.nbytes);
    });
  }

  // Two messages per send: its size (so a recv of another size fails by name instead of breaking
  // the connection), then the data.
  Work send(const Tensor& tensor, int peer, StreamRef) override {
    std::string what = next_call("send", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, Device::cpu());
    const std::int64_t message = sent_[peer]++;
    return point_to_point(std::move(what), hold(tensor), [data = tensor.raw_data(), bytes = tensor.nbytes(), peer,
                                                           message](const GlooCall& call) {
      auto size = std::make_shared<std::int64_t>(static_cast<std::int64_t>(bytes));
      call.link.hold(size);
      auto& header = call.link.buffer(size.get(), sizeof(std::int64_t));
      call.link.send(header, peer, detail::point_to_point_slot(message, false), 0, sizeof(std::int64_t));
      gloo::transport::UnboundBuffer* payload = nullptr;
      if (bytes > 0) {
        payload = &call.link.buffer(data, bytes);
        call.link.send(*payload, peer, detail::point_to_point_slot(message, true), 0, bytes);
      }
      call.link.wait_send(header, peer);
      if (payload != nullptr) call.link.wait_send(*payload, peer);
    });
  }

  Work recv(const Tensor& tensor, int peer, StreamRef) override {
    std::string what = next_call("recv", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, Device::cpu());
    const std::int64_t message = received_[peer]++;
    return point_to_point(std::move(what), hold(tensor), [tensor, peer, message](const GlooCall& call) {
      auto size = std::make_shared<std::int64_t>(-1);
      call.link.hold(size);
      auto& header = call.link.buffer(size.get(), sizeof(std::int64_t));
      call.link.recv(header, peer, detail::point_to_point_slot(message, false), 0, sizeof(std::int64_t));
      call.link.wait_recv(header, peer);
      const auto sent = static_cast<std::size_t>(*size);
      void* destination = tensor.raw_data();
      if (sent != tensor.nbytes()) destination = call.scratch.get(call.link, 0, sent);  // let the sender finish
      if (sent > 0) {
        auto& payload = call.link.buffer(destination, sent);
        call.link.recv(payload, peer, detail::point_to_point_slot(message, true), 0, sent);
        call.link.wait_recv(payload, peer);
      }
      if (sent != tensor.nbytes())
        fail(ErrorCategory::invalid_argument, call.what, ": rank ", peer, " sent ", sent, " bytes but this recv expects ",
             tensor, " (", tensor.nbytes(), " bytes)");
    });
  }

  Work barrier(StreamRef) override {
    return collective(next_call("barrier"), nullptr, [](const GlooCall& call) { detail::gloo_barrier(call); });
  }

  void abort(const std::string& reason) override {
    if (engine_->link.aborted()) return;  // by a peer's notice or a timeout: the peers know
    engine_->link.abort(ErrorCategory::aborted, loom::detail::concat("rank ", rank_, ": ", reason));
  }

  // The child's connections are made through this communicator: every rank publishes its color and
  // key, then the members of each group their new pairs' addresses.
  std::unique_ptr<Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    const std::string what = next_call("split");
    backend::require_color(what, color);
    backend::require_split_timeout(what, timeout);
    const std::vector<std::string> choices = all_gather_texts(*this, loom::detail::concat(color, " ", key));
    std::vector<std::tuple<int, int>> members;  // (key, old rank) of this rank's group
    for (int r = 0; r < size_; ++r) {
      int their_color = 0, their_key = 0;
      const std::string& text = choices[static_cast<std::size_t>(r)];
      const auto space = text.find(' ');
      std::from_chars(text.data(), text.data() + space, their_color);
      std::from_chars(text.data() + space + 1, text.data() + text.size(), their_key);
      if (color != no_color && their_color == color) members.emplace_back(their_key, r);
    }
    std::sort(members.begin(), members.end());
    int child_rank = -1;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (std::get<1>(members[i]) == rank_) child_rank = static_cast<int>(i);
    const int child_size = static_cast<int>(members.size());
    CommOptions options = options_;
    if (timeout) options.timeout = *timeout;
    // Every rank takes part in the exchange (a rank without a color publishes nothing).
    std::shared_ptr<gloo::transport::Context> transport;
    const BlobExchange through_parent = [&](std::span<const unsigned char> mine) {
      const std::vector<std::string> all = all_gather_texts(*this, std::string(mine.begin(), mine.end()));
      std::vector<std::vector<unsigned char>> blobs;
      for (const auto& member : members) {
        const std::string& text = all[static_cast<std::size_t>(std::get<1>(member))];
        blobs.emplace_back(text.begin(), text.end());
      }
      return blobs;
    };
    if (color == no_color) {
      all_gather_texts(*this, std::string());
      return nullptr;
    }
    transport = detail::connect_gloo_mesh(engine_->device, child_rank, child_size, through_parent, options.timeout);
    return std::make_unique<GlooCommunicator>(engine_->device, std::move(transport), options);
  }

 private:
  std::string next_call(const char* op, int peer = -1) {
    ++sequence_;
    return backend::describe_call("Gloo", loom::detail::concat(op, " #", sequence_), rank_, size_, Device::cpu(), peer);
  }

  template <class Body>
  Work collective(std::string what, std::shared_ptr<void> held, Body body) {
    const std::int64_t index = ++collectives_;
    return calls_->enqueue_named(std::move(what), [index, held = std::move(held), body = std::move(body),
                                                   engine = engine_](const std::string& call) mutable {
      engine->run(call, index, std::move(held), body);
    });
  }

  template <class Body>
  Work point_to_point(std::string what, std::shared_ptr<void> held, Body body) {
    return calls_->enqueue_named(std::move(what), [held = std::move(held), body = std::move(body),
                                                   engine = engine_](const std::string& call) mutable {
      engine->run(call, 0, std::move(held), body);
    });
  }

  CommOptions options_;
  int rank_ = 0, size_ = 1;
  std::int64_t sequence_ = 0, collectives_ = 0;
  std::map<int, std::int64_t> sent_, received_;  // point-to-point messages per peer
  std::unique_ptr<backend::CallQueue> calls_;
  std::shared_ptr<Engine> engine_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(int rank, int size, const BlobExchange& exchange,
                                                     const GlooOptions& gloo, const CommOptions& options) {
  require(size >= 1 && rank >= 0 && rank < size, "Gloo communicator: rank ", rank, " is outside a world of ", size);
  require(options.timeout.count() > 0, "Gloo communicator: the timeout must be positive");
  std::shared_ptr<gloo::transport::Device> device = detail::make_gloo_device(gloo);
  std::shared_ptr<gloo::transport::Context> transport =
      detail::connect_gloo_mesh(device, rank, size, exchange, options.timeout);
  std::unique_ptr<Communicator> out = std::make_unique<GlooCommunicator>(std::move(device), std::move(transport), options);
  return options.check_collectives ? detail::with_collective_checks(std::move(out)) : std::move(out);
}

bool gloo_built() { return true; }

}  // namespace loom::comm
