// The handle every communication call returns: completion, waiting with a timeout, and the
// operation's error.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "loom/core/stream.hpp"

namespace loom::comm {

// What an operation reports, once complete, to an on_complete callback.
struct Completion {
  bool succeeded = true;
  // How long the operation ran on the device: from when its turn on the communication stream came
  // (the caller's stream had reached the call and the calls before it were done) to its end, as
  // the GPU backend's events measured it. It includes any wait for a peer that called late. Empty
  // where the backend measures no device time (the CPU backends: there the host's span is the
  // operation's own).
  std::optional<double> device_seconds;
};

namespace detail {
struct WorkState {
  std::mutex mutex;
  std::condition_variable done_changed;
  std::atomic<bool> done{false};  // read without the mutex by waiters that spin briefly
  std::exception_ptr error;
  std::string what;  // the operation, for timeout messages
  // Set by a backend that lets the waiting thread run the call itself (an inline CallQueue):
  // wait() calls help(helper, *this) first, if the helper still exists.
  void (*help)(const std::shared_ptr<void>& helper, WorkState& work) = nullptr;
  std::weak_ptr<void> helper;
  // Set by a GPU backend while the operation runs: makes a stream wait for it on the device (an
  // event), so the host need not. complete() clears it (its event may then serve another call).
  std::function<void(StreamRef)> device_wait;
  // Called once by complete(), on the completing thread, before waiters see the operation done
  // (a meter's or a tracer's: what they record is in place when wait() returns).
  std::function<void(const Completion&)> completed;
  bool completing = false;  // complete() has begun (under mutex)
  // The operation's time on the device: set by a GPU backend, without the mutex, on the thread
  // that then calls complete() (whose lock publishes it to every later reader).
  std::optional<double> device_seconds;
  // The first completion wins: a call failed by a watchdog stays failed when it returns later.
  void complete(std::exception_ptr failure);
};
}  // namespace detail

class Work {
 public:
  Work() = default;  // an already completed, successful operation
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  bool is_completed() const;
  // Runs callback once the operation is done (success or failure): at once, here, when it already
  // is (or is being completed), else on the thread that completes it, before wait() returns. One
  // callback per operation; it must not throw.
  void on_complete(std::function<void(const Completion&)> callback) const;
  // Blocks until the operation is done and rethrows its error. A timeout Error names the operation
  // when it is not done within `timeout` (the operation itself keeps its own deadline).
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  // Orders `stream` after the operation: work enqueued on the stream from now on sees its result.
  // On a GPU backend the stream waits on the device and the host goes on at once (an error then
  // shows at a later wait()); on the CPU, where there is nothing to enqueue, it is wait().
  void wait_on(StreamRef stream) const;
  // The operation's error once completed (nullptr when it succeeded or is still running).
  std::exception_ptr error() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace loom::comm
