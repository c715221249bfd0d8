#include "loom/comm/nccl.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include "loom/core/cuda_check.hpp"
#include "loom/core/error.hpp"
#include "loom/core/nccl_check.hpp"
#include "loom/comm/backend/call_checks.hpp"
#include "loom/comm/backend/in_order_deadlines.hpp"
#include "src/comm/checked.hpp"
#include "loom/core/cuda_device_guard.hpp"

namespace loom::comm {

namespace {

std::atomic<bool> nccl_aborted_any{false};

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclId>, "NcclId must hold an ncclUniqueId");

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(const std::string& what, DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: fail(ErrorCategory::invalid_argument, what, ": dtype ", dtype, " cannot be reduced (f32, f16, bf16, i32, i64)");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// Waits until a non-blocking NCCL call on `comm` has left ncclInProgress; throws its error, or a
// timeout Error at the deadline.
void settle(ncclComm_t comm, ncclResult_t status, const std::string& what, Clock::time_point deadline) {
  if (status != ncclInProgress) check(status, what);
  ncclResult_t state = status;
  while (state == ncclInProgress) {
    if (Clock::now() > deadline) fail(ErrorCategory::timeout, what, ": NCCL did not finish enqueueing in time");
    std::this_thread::yield();
    check(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
  }
  check(state, what);
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

struct InFlight {
  std::shared_ptr<detail::WorkState> work;
  cudaEvent_t started = nullptr;  // passed once the call's turn on the communication stream has come
  cudaEvent_t done = nullptr;
  std::vector<Tensor> keep_alive;  // the call's buffers stay allocated until the GPU is done with them
};

// Waits until `stream` has drained, at most until `deadline`; false if it has not.
bool drain(cudaStream_t stream, Clock::time_point deadline) {
  for (;;) {
    const cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaSuccess) return true;
    if (state != cudaErrorNotReady) check(state, "cudaStreamQuery");
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, Device device, const CommOptions& options)
      : comm_(comm), device_(device), options_(options), deadlines_(options.timeout) {
    const loom::detail::CudaDeviceGuard guard(device_);
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(ncclCommCount(comm_, &size_), "ncclCommCount");
    // The highest priority the device has: NCCL's kernels are scheduled ahead of the GEMMs they
    // overlap with instead of waiting for SMs behind them.
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    barrier_scratch_ = Tensor::zeros({1}, DType::f32, device_);
    watcher_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    // Bounded: the oldest call completes or times out within the timeout of becoming the oldest,
    // and a timeout fails every call in flight.
    watcher_.join();
    try {
      const loom::detail::CudaDeviceGuard guard(device_);
      if (!aborted_) {
        bool finalized = false;
        try {
          settle(comm_, ncclCommFinalize(comm_), "ncclCommFinalize", Clock::now() + options_.timeout);
          finalized = true;
        } catch (const Error& e) {  // the stream and the events are still released below
          std::fprintf(stderr, "loom: finalizing the NCCL communicator failed, aborting it: %s\n", e.what());
          aborted_ = true;
          start_nccl_abort();
        }
        if (finalized) {
          const ncclResult_t destroyed = ncclCommDestroy(comm_);  // gone even if it reports an error
          if (destroyed != ncclSuccess) {
            std::fprintf(stderr, "loom: ncclCommDestroy reported %s\n", ncclGetErrorString(destroyed));
          }
        }
      }
      // Aborted kernels end once the stream drains; only then may their buffers be reused. A stream
      // that waits behind a hung kernel of the caller's never drains: after a moment, what it may
      // still use is left allocated rather than waited for (a cudaFree would wait for it too).
      const auto patience = aborted_ ? std::chrono::milliseconds(1000) : options_.timeout;
      const bool drained = drain(stream_, Clock::now() + patience);
      if (abort_.thread.joinable()) {  // ncclCommAbort waits for NCCL's streams, which may wait for the caller's
        const auto until = Clock::now() + std::chrono::milliseconds(1000);
        while (!abort_.finished->load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (abort_.finished->load()) abort_.thread.join();
        else abort_.thread.detach();  // it keeps what it uses; the communicator is left to it
      }
      if (!drained) {
        std::fprintf(stderr, "loom: the NCCL communicator's stream did not drain within %lld ms (a kernel before a "
                     "call hangs?); its stream, events and %zu buffers are left allocated\n",
                     static_cast<long long>(patience.count()), abandoned_.size() + 1);
        auto* kept = new std::vector<Tensor>(std::move(abandoned_));  // never freed: the GPU may still use them
        kept->push_back(std::move(barrier_scratch_));
        return;
      }
      abandoned_.clear();
      for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
      cudaEventDestroy(ready_);
      check(cudaStreamDestroy(stream_), "cudaStreamDestroy");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom: closing the NCCL communicator failed: %s\n", e.what());
    }
    if (abort_.thread.joinable()) abort_.thread.detach();  // only after an error above: never joined unbounded
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }
  std::string_view backend() const override { return "nccl"; }

  Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream) override {
    const std::string what = describe("all_reduce");
    backend::require_reducible(what, input, output, op, 1, device_);
    require_nccl_layout(what, input, output, input, output);
    return submit(what, stream, {input, output}, [&](cudaStream_t s) {
      return ncclAllReduce(input.raw_data(), output.raw_data(), count(input), nccl_type(what, input.dtype()),
                           nccl_op(op), comm_, s);
    });
  }

  Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef stream) override {
    const std::string what = describe("reduce");
    backend::require_root(what, root, size_);
    const bool is_root = rank_ == root;
    backend::require_reducible(what, input, is_root ? output : input, op, 1, device_);
    return submit(what, stream, {input, output}, [&](cudaStream_t s) {
      return ncclReduce(input.raw_data(), is_root ? output.raw_data() : nullptr, count(input),
                        nccl_type(what, input.dtype()), nccl_op(op), root, comm_, s);
    });
  }

  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream) override {
    const std::string what = describe("reduce_scatter");
    backend::require_reducible(what, input, output, op, size_, device_);
    require_nccl_layout(what, input, output, input, output);
    return submit(what, stream, {input, output}, [&](cudaStream_t s) {
      return ncclReduceScatter(input.raw_data(), output.raw_data(), count(output), nccl_type(what, input.dtype()),
                               nccl_op(op), comm_, s);
    });
  }

  Work broadcast(const Tensor& tensor, int root, StreamRef stream) override {
    const std::string what = describe("broadcast");
    backend::require_root(what, root, size_);
    backend::require_on_device(what, "tensor", tensor, device_);
    return submit(what, stream, {tensor}, [&](cudaStream_t s) {
      return ncclBroadcast(tensor.raw_data(), tensor.raw_data(), tensor.nbytes(), ncclUint8, root, comm_, s);
    });
  }

  Work all_gather(const Tensor& input, const Tensor& output, StreamRef stream) override {
    const std::string what = describe("all_gather");
    backend::require_gatherable(what, input, output, size_, device_);
    require_nccl_layout(what, input, output, output, input);
    return submit(what, stream, {input, output}, [&](cudaStream_t s) {
      return ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclUint8, comm_, s);
    });
  }

  Work send(const Tensor& tensor, int peer, StreamRef stream) override {
    const std::string what = describe("send", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, device_);
    return submit(what, stream, {tensor}, [&](cudaStream_t s) {
      return ncclSend(tensor.raw_data(), tensor.nbytes(), ncclUint8, peer, comm_, s);
    });
  }

  Work recv(const Tensor& tensor, int peer, StreamRef stream) override {
    const std::string what = describe("recv", peer);
    backend::require_peer(what, tensor, peer, rank_, size_, device_);
    return submit(what, stream, {tensor}, [&](cudaStream_t s) {
      return ncclRecv(tensor.raw_data(), tensor.nbytes(), ncclUint8, peer, comm_, s);
    });
  }

  Work barrier(StreamRef stream) override {
    const std::string what = describe("barrier");
    return submit(what, stream, {barrier_scratch_}, [&](cudaStream_t s) {
      return ncclAllReduce(barrier_scratch_.raw_data(), barrier_scratch_.raw_data(), 1, ncclFloat32, ncclSum, comm_, s);
    });
  }

  // No channel to the peers: this rank's calls fail; theirs at their timeout.
  void abort(const std::string& reason) override {
    const std::lock_guard lock(mutex_);
    abort_locked(ErrorCategory::aborted, loom::detail::concat("rank ", rank_, ": ", reason));
  }

  std::unique_ptr<Communicator> split(int color, int key, std::optional<std::chrono::milliseconds> timeout) override {
    const std::string what = describe("split");
    backend::require_color(what, color);
    backend::require_split_timeout(what, timeout);
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return in_flight_.empty() || aborted_; });  // after the earlier calls
    if (aborted_) fail(abort_category_, what, ": the NCCL communicator was aborted (", abort_reason_, ")");
    const loom::detail::CudaDeviceGuard guard(device_);
    ncclConfig_t config = nonblocking_config();
    ncclComm_t child = nullptr;
    const auto deadline = Clock::now() + options_.timeout;
    try {
      settle(comm_, ncclCommSplit(comm_, color == no_color ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config), what,
             deadline);
      if (child != nullptr) settle(child, ncclInProgress, what, deadline);
      settle(comm_, ncclInProgress, what, deadline);  // the parent too: NCCL treats a split like a collective on it
    } catch (const Error& e) {
      if (child != nullptr) ncclCommAbort(child);
      abort_locked(e.category(), e.detail());
      throw;
    }
    if (child == nullptr) return nullptr;
    CommOptions options = options_;
    if (timeout) options.timeout = *timeout;
    return std::make_unique<NcclCommunicator>(child, device_, options);
  }

 private:
  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

  std::string describe(const char* op, int peer = -1) const {
    return backend::describe_call("NCCL", op, rank_, size_, device_, peer);
  }

  // NCCL computes in place only in its own layouts (output == input for all_reduce; the rank's
  // block for reduce_scatter and all_gather); any other overlap would silently corrupt data.
  void require_nccl_layout(const std::string& what, const Tensor& input, const Tensor& output, const Tensor& whole,
                           const Tensor& part) const {
    const auto* in = static_cast<const unsigned char*>(input.raw_data());
    const auto* out = static_cast<const unsigned char*>(output.raw_data());
    if (input.nbytes() == 0 || output.nbytes() == 0 || in >= out + output.nbytes() || out >= in + input.nbytes()) return;
    const auto* start = static_cast<const unsigned char*>(whole.raw_data());
    const bool in_place = input.nbytes() == output.nbytes()
                              ? in == out
                              : static_cast<const unsigned char*>(part.raw_data()) ==
                                    start + static_cast<std::size_t>(rank_) * part.nbytes();
    require(in_place, what, ": input ", input, " and output ", output,
            " overlap, but NCCL computes in place only on the same buffer, or with the smaller one being this "
            "rank's block of the larger");
  }

  // Orders the call after the caller's stream, enqueues it on the communication stream, and hands
  // its end event to the watcher.
  Work submit(const std::string& what, StreamRef after, std::vector<Tensor> tensors,
              const std::function<ncclResult_t(cudaStream_t)>& call) {
    require(after.is_default() || after.device() == device_, what, ": the caller's stream is on ", after.device(),
            " but the communicator on ", device_);
    const auto user_stream = after.is_default() ? nullptr : static_cast<cudaStream_t>(after.native_handle());
    auto work = std::make_shared<detail::WorkState>();
    work->what = what;
    const std::lock_guard lock(mutex_);
    if (aborted_) {
      work->complete(std::make_exception_ptr(
          Error(abort_category_, what + ": the NCCL communicator was aborted (" + abort_reason_ + ")")));
      return Work(work);
    }
    const loom::detail::CudaDeviceGuard guard(device_);
    // The wait captures the event's state when it is enqueued, so one event serves every call.
    check(cudaEventRecord(ready_, user_stream), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    const cudaEvent_t started = take_event();
    check(cudaEventRecord(started, stream_), "cudaEventRecord");
    try {
      const auto deadline = Clock::now() + options_.timeout;
      // A non-blocking communicator can still be in progress after a split or a finalized child
      // (NCCL then rejects the call, "Attempt to use communicator before the previous operation
      // returned ncclSuccess", as the one-rank conformance suite saw on an H200): wait for it first.
      settle(comm_, ncclInProgress, what, deadline);
      settle(comm_, call(stream_), what, deadline);
    } catch (const Error& e) {
      spare_events_.push_back(started);
      abort_locked(e.category(), e.detail());
      throw;
    }
    const cudaEvent_t done = take_event();
    check(cudaEventRecord(done, stream_), "cudaEventRecord");
    // Until the watcher completes the work (and may reuse `done`), a stream can wait on it.
    work->device_wait = [device = device_, done](StreamRef stream) {
      const loom::detail::CudaDeviceGuard on_device(device);
      const auto target = stream.is_default() ? nullptr : static_cast<cudaStream_t>(stream.native_handle());
      check(cudaStreamWaitEvent(target, done, 0), "cudaStreamWaitEvent");
    };
    in_flight_.push_back({work, started, done, std::move(tensors)});
    deadlines_.submitted(Clock::now());
    changed_.notify_all();
    return Work(work);
  }

  // An event from the spares (events of completed calls are reused: no create/destroy per call).
  cudaEvent_t take_event() {
    if (!spare_events_.empty()) {
      const cudaEvent_t event = spare_events_.back();
      spare_events_.pop_back();
      return event;
    }
    // With timing: the watcher reads each call's device time from its two events.
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDefault), "cudaEventCreateWithFlags");
    return event;
  }

  // Completes calls in order as their end events pass; aborts on an asynchronous NCCL error or a
  // call past its deadline.
  void watch() {
    if (cudaSetDevice(device_.index()) != cudaSuccess) std::fprintf(stderr, "loom: NCCL watcher: cudaSetDevice failed\n");
    std::unique_lock lock(mutex_);
    auto pause = std::chrono::microseconds(10);  // grows while nothing completes, up to 500 us
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
      if (in_flight_.empty()) return;
      InFlight& head = in_flight_.front();
      const cudaError_t state = cudaEventQuery(head.done);
      if (state == cudaSuccess) {
        pause = std::chrono::microseconds(10);
        // The device time, for the telemetry's achieved bandwidth (the host sees the end late, by
        // up to one poll pause). Both events have passed: `started` precedes `done` on the stream.
        float milliseconds = 0;
        if (cudaEventElapsedTime(&milliseconds, head.started, head.done) == cudaSuccess) {
          head.work->device_seconds = milliseconds / 1e3;
        }
        spare_events_.push_back(head.started);
        spare_events_.push_back(head.done);
        std::shared_ptr<detail::WorkState> work = std::move(head.work);
        in_flight_.pop_front();
        deadlines_.completed(Clock::now());
        work->complete(nullptr);
        changed_.notify_all();
        continue;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (state != cudaErrorNotReady) {
        abort_locked(ErrorCategory::cuda, std::string("CUDA error ") + cudaGetErrorName(state) + " while communicating");
      } else if (async != ncclSuccess && async != ncclInProgress) {
        abort_locked(ErrorCategory::nccl, std::string("NCCL reported ") + ncclGetErrorString(async) + " (" +
                                              ncclGetLastError(comm_) + ")");
      } else if (deadlines_.expired(Clock::now())) {
        // NCCL's own abort (on a thread of its own) stops the kernels, the running and the queued:
        // they see its flag when the stream reaches them.
        abort_locked(ErrorCategory::timeout,
                     cudaEventQuery(head.started) == cudaSuccess
                         ? backend::not_completed_within(options_.timeout)
                         : loom::detail::concat("not completed within ", options_.timeout.count(),
                                                " ms; it never started: the work queued before it on the caller's "
                                                "stream has not finished (a hung kernel?)"));
      } else {
        lock.unlock();
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(500));
        lock.lock();
      }
    }
  }

  // Fails every call in flight (and later calls at once), and aborts the NCCL communicator.
  void abort_locked(ErrorCategory category, const std::string& reason) {
    if (aborted_) return;
    aborted_ = true;
    nccl_aborted_any.store(true);
    abort_category_ = category;
    abort_reason_ = reason;
    for (InFlight& call : in_flight_) {
      call.work->complete(std::make_exception_ptr(
          Error(category, call.work->what + ": " + reason + "; the NCCL communicator is aborted")));
      // The GPU may not have released the buffers yet: keep them, and the events, until destruction.
      for (Tensor& t : call.keep_alive) abandoned_.push_back(std::move(t));
      spare_events_.push_back(call.started);
      spare_events_.push_back(call.done);
    }
    in_flight_.clear();
    deadlines_.clear();
    changed_.notify_all();
    start_nccl_abort();
  }

  // ncclCommAbort on a thread of its own: it waits for NCCL's streams, which can hang behind the
  // caller's work; neither the calls' errors nor the destructor wait for it unboundedly.
  void start_nccl_abort() {
    if (abort_.thread.joinable() || abort_.finished->load()) return;
    try {
      abort_.thread = std::thread([comm = comm_, device = device_.index(), finished = abort_.finished] {
        cudaSetDevice(device);
        ncclCommAbort(comm);
        finished->store(true);
      });
    } catch (const std::system_error& e) {  // no thread to be had: abort here, however long it takes
      std::fprintf(stderr, "loom: no thread for ncclCommAbort (%s); aborting inline\n", e.what());
      ncclCommAbort(comm_);
      abort_.finished->store(true);
    }
  }

  ncclComm_t comm_;
  Device device_;
  CommOptions options_;
  int rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;         // recorded on the caller's stream before each call
  std::vector<cudaEvent_t> spare_events_;
  Tensor barrier_scratch_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<InFlight> in_flight_;
  backend::InOrderDeadlines deadlines_;  // of in_flight_
  std::vector<Tensor> abandoned_;
  bool stopping_ = false, aborted_ = false;
  struct {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished = std::make_shared<std::atomic<bool>>(false);
  } abort_;
  ErrorCategory abort_category_ = ErrorCategory::timeout;
  std::string abort_reason_;
  std::thread watcher_;
};

}  // namespace

NcclId make_nccl_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  NcclId out;
  std::memcpy(out.data(), &id, out.size());
  return out;
}

bool nccl_communicator_aborted() { return nccl_aborted_any.load(); }

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int rank, int size, Device device,
                                                     const CommOptions& options) {
  require(device.is_cuda(), "NCCL communicator: device ", device, " is not a CUDA device");
  require(size >= 1 && rank >= 0 && rank < size, "NCCL communicator: rank ", rank, " is outside a world of ", size);
  require(options.timeout.count() > 0, "NCCL communicator: the timeout must be positive");
  const loom::detail::CudaDeviceGuard guard(device);
  ncclUniqueId unique;
  std::memcpy(&unique, id.data(), id.size());
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const std::string what = loom::detail::concat("NCCL communicator init (rank ", rank, " of ", size, " on ", device, ")");
  try {
    const ncclResult_t started = ncclCommInitRankConfig(&comm, size, unique, rank, &config);  // sets comm first
    settle(comm, started, what, Clock::now() + options.timeout);
  } catch (const Error& e) {
    if (comm != nullptr) ncclCommAbort(comm);
    if (e.category() == ErrorCategory::timeout) {
      fail(ErrorCategory::timeout, what, ": not all ", size, " ranks joined within ", options.timeout.count(), " ms");
    }
    throw;
  }
  std::unique_ptr<Communicator> out = std::make_unique<NcclCommunicator>(comm, device, options);
  return options.check_collectives ? detail::with_collective_checks(std::move(out)) : std::move(out);
}

}  // namespace loom::comm
