#include "loom/telemetry/comm_meter.hpp"

#include <algorithm>

#include "loom/telemetry/trace.hpp"

namespace loom::telemetry {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::other: return "other";
  }
  return "other";
}

namespace {

// nccl-tests' bus bandwidth factor: what each rank's links carry per byte of the buffer.
double bus_factor(CollectiveKind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case CollectiveKind::all_reduce: return 2 * (n - 1) / n;
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather: return (n - 1) / n;
    case CollectiveKind::other: return 1;
  }
  return 1;
}

}  // namespace

double CommTotals::bus_bytes_per_second(CollectiveKind kind) const {
  const CollectiveTotals& t = (*this)[kind];
  if (t.seconds <= 0 || ranks < 2) return 0;
  return static_cast<double>(t.bytes) * bus_factor(kind, ranks) / t.seconds;
}

std::optional<double> CommTotals::predicted_bus_bytes_per_second(CollectiveKind kind) const {
  const CollectiveTotals& t = (*this)[kind];
  if (!t.predicted_seconds || *t.predicted_seconds <= 0 || ranks < 2) return std::nullopt;
  return static_cast<double>(t.bytes) * bus_factor(kind, ranks) / *t.predicted_seconds;
}

void CommMeter::add(CollectiveKind kind, std::int64_t bytes, Clock::time_point start, Clock::time_point end,
                    std::optional<double> device_seconds) {
  const std::lock_guard lock(mutex_);
  CollectiveTotals& t = totals_[kind];
  ++t.calls;
  if (bytes < bandwidth_min_bytes) return;
  ++t.measured_calls;
  t.bytes += bytes;
  if (device_seconds) {  // one communication stream runs its calls one after another: they add up
    ++t.device_timed_calls;
    t.seconds += *device_seconds;
    return;
  }
  // The union of the intervals: a call queued behind the previous one counts from where that ended.
  Clock::time_point& busy = busy_until_[static_cast<std::size_t>(kind)];
  const Clock::time_point from = std::max(start, busy);
  if (end > from) t.seconds += std::chrono::duration<double>(end - from).count();
  busy = std::max(busy, end);
}

CommTotals CommMeter::take(int ranks) {
  const std::lock_guard lock(mutex_);
  CommTotals out = totals_;
  out.ranks = ranks;
  totals_ = {};
  return out;
}

namespace {

class ObservedCommunicator : public comm::Communicator {
 public:
  ObservedCommunicator(comm::Communicator& inner, const std::shared_ptr<TraceRecorder>& trace,
                       const std::shared_ptr<CommMeter>& meter)
      : inner_(inner), trace_(trace), meter_(meter), has_trace_(trace != nullptr), has_meter_(meter != nullptr) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Device device() const override { return inner_.device(); }
  std::string_view backend() const override { return inner_.backend(); }

  comm::Work all_reduce(const Tensor& input, const Tensor& output, comm::ReduceOp op, StreamRef stream) override {
    return observed(CollectiveKind::all_reduce, input.nbytes(), [&] { return inner_.all_reduce(input, output, op, stream); });
  }
  comm::Work reduce(const Tensor& input, const Tensor& output, comm::ReduceOp op, int root, StreamRef stream) override {
    return observed(CollectiveKind::other, input.nbytes(), [&] { return inner_.reduce(input, output, op, root, stream); },
                    "reduce");
  }
  comm::Work broadcast(const Tensor& tensor, int root, StreamRef stream) override {
    return observed(CollectiveKind::other, tensor.nbytes(), [&] { return inner_.broadcast(tensor, root, stream); },
                    "broadcast");
  }
  comm::Work all_gather(const Tensor& input, const Tensor& output, StreamRef stream) override {
    return observed(CollectiveKind::all_gather, output.nbytes(), [&] { return inner_.all_gather(input, output, stream); });
  }
  comm::Work reduce_scatter(const Tensor& input, const Tensor& output, comm::ReduceOp op, StreamRef stream) override {
    return observed(CollectiveKind::reduce_scatter, input.nbytes(),
                    [&] { return inner_.reduce_scatter(input, output, op, stream); });
  }
  comm::Work send(const Tensor& tensor, int peer, StreamRef stream) override {
    return observed(CollectiveKind::other, tensor.nbytes(), [&] { return inner_.send(tensor, peer, stream); }, "send");
  }
  comm::Work recv(const Tensor& tensor, int peer, StreamRef stream) override {
    return observed(CollectiveKind::other, tensor.nbytes(), [&] { return inner_.recv(tensor, peer, stream); }, "recv");
  }
  comm::Work barrier(StreamRef stream) override {
    return observed(CollectiveKind::other, 0, [&] { return inner_.barrier(stream); }, "barrier");
  }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  std::unique_ptr<comm::Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    return inner_.split(color, key, timeout);
  }

 private:
  // The span runs from the call to the operation's completion (on a GPU: when the backend sees
  // its end event pass; the device ran it within that span).
  template <class Call>
  comm::Work observed(CollectiveKind kind, std::size_t bytes, const Call& call, const char* name = nullptr) {
    std::shared_ptr<TraceRecorder> trace = has_trace_ ? trace_.lock() : nullptr;
    const bool tracing = trace != nullptr && trace->recording();
    if (!tracing && !has_meter_) return call();
    const std::int64_t step = tracing ? trace->step() : 0;  // the step that made the call
    const auto start = CommMeter::Clock::now();
    comm::Work work = call();
    const char* label = name != nullptr ? name : collective_name(kind).data();
    work.on_complete([trace = tracing ? trace_ : std::weak_ptr<TraceRecorder>(), meter = meter_, kind, label, bytes,
                      start, step](const comm::Completion& completion) {
      const auto end = CommMeter::Clock::now();
      const auto size = static_cast<std::int64_t>(bytes);
      // A failed call is not metered at all (neither counted nor timed); its span still shows in the trace.
      if (const auto m = meter.lock(); m && completion.succeeded) m->add(kind, size, start, end, completion.device_seconds);
      if (const auto t = trace.lock()) t->host_span(label, "communication", TraceTrack::communication, start, end, size, step);
    });
    return work;
  }

  comm::Communicator& inner_;
  std::weak_ptr<TraceRecorder> trace_;
  std::weak_ptr<CommMeter> meter_;
  bool has_trace_, has_meter_;
};

}  // namespace

std::unique_ptr<comm::Communicator> observed_communicator(comm::Communicator& inner,
                                                          const std::shared_ptr<TraceRecorder>& trace,
                                                          const std::shared_ptr<CommMeter>& meter) {
  return std::make_unique<ObservedCommunicator>(inner, trace, meter);
}

}  // namespace loom::telemetry
