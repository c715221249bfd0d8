#include "loom/comm/backend/call_queue.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "loom/core/error.hpp"
#include "loom/comm/backend/call_checks.hpp"

namespace loom::comm::backend {

using detail::WorkState;

namespace {
std::atomic<bool> abandoned_any{false};

struct Call {
  std::shared_ptr<WorkState> work;
  std::function<void()> body;
};
}  // namespace

bool calls_were_abandoned() { return abandoned_any.load(); }

void note_abandoned_call() { abandoned_any.store(true); }

struct CallQueue::State {
  std::string name;
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable changed;        // the queue, the running call, the worker's exit
  std::condition_variable watch_changed;  // stopping, for the watchdog
  std::deque<Call> queue;
  std::atomic<int> queued{0};  // queue.size(), for the worker's brief spin
  std::shared_ptr<WorkState> current;
  std::chrono::steady_clock::time_point started;
  bool stopping = false, worker_exited = false, aborted = false;
  std::string abort_reason;

  void fail_queued_locked(const std::string& reason) {
    for (Call& call : queue) {
      call.work->complete(std::make_exception_ptr(Error(ErrorCategory::timeout, call.work->what + ": " + reason)));
    }
    queue.clear();
    queued = 0;
  }

  void work_loop() {
    for (;;) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (queued.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
      }
      Call call;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) {
          worker_exited = true;
          changed.notify_all();
          watch_changed.notify_all();
          return;
        }
        call = std::move(queue.front());
        queue.pop_front();
        --queued;
        current = call.work;
        started = std::chrono::steady_clock::now();
      }
      std::exception_ptr failure;
      try {
        call.body();
      } catch (...) {
        failure = std::current_exception();
      }
      call.body = nullptr;  // release the call's captures before the caller learns it is done
      {
        const std::lock_guard lock(mutex);
        current = nullptr;
      }
      call.work->complete(failure);
      changed.notify_all();
    }
  }

  // Checks the running call every tick instead of being woken by each call, so that the hot path
  // (enqueue, start, complete) never wakes this thread. A call is failed between `timeout` and
  // `timeout + tick` (tick = timeout / 16, at most 250 ms) after it started.
  void watch_loop() {
    const auto tick = std::clamp<std::chrono::milliseconds>(timeout / 16, std::chrono::milliseconds(1),
                                                            std::chrono::milliseconds(250));
    std::unique_lock lock(mutex);
    for (;;) {
      if (worker_exited || (stopping && aborted)) return;
      watch_changed.wait_for(lock, tick);
      if (!current || aborted || std::chrono::steady_clock::now() - started < timeout) continue;
      aborted = true;
      abort_reason = concat_reason(current->what);
      current->complete(std::make_exception_ptr(Error(ErrorCategory::timeout, abort_reason)));
      fail_queued_locked(std::string("not run: the ") + name + " was aborted by an earlier timeout (" +
                         abort_reason + ")");
      changed.notify_all();
    }
  }

  std::string concat_reason(const std::string& what) const {
    return what + ": " + not_completed_within(timeout) + "; the " + name + " is aborted";
  }

  std::thread worker, watchdog;
};

CallQueue::CallQueue(std::string name, std::chrono::milliseconds watchdog_timeout)
    : state_(std::make_shared<State>()) {
  require(watchdog_timeout.count() >= 0, name, ": the timeout must not be negative");
  state_->name = std::move(name);
  state_->timeout = watchdog_timeout;
  state_->worker = std::thread([s = state_] { s->work_loop(); });
  if (watchdog_timeout.count() > 0) state_->watchdog = std::thread([s = state_] { s->watch_loop(); });
}

CallQueue::~CallQueue() {
  std::unique_lock lock(state_->mutex);
  state_->stopping = true;
  state_->changed.notify_all();
  state_->watch_changed.notify_all();
  // Queued calls still run (their peers may be about to join); a stuck one ends by timing out,
  // and is then given a moment (at most a second) to return before its thread is abandoned.
  state_->changed.wait(lock, [&] { return state_->worker_exited || (state_->aborted && state_->current); });
  if (!state_->worker_exited) {
    state_->changed.wait_for(lock, std::min<std::chrono::milliseconds>(state_->timeout, std::chrono::seconds(1)),
                             [&] { return state_->worker_exited; });
  }
  const bool stuck = !state_->worker_exited;
  lock.unlock();
  if (stuck) {
    abandoned_any = true;
    state_->worker.detach();  // it owns a reference to the state; nothing it uses is freed
  } else {
    state_->worker.join();
  }
  if (state_->watchdog.joinable()) state_->watchdog.join();
}

Work CallQueue::enqueue(std::string what, std::function<void()> call) {
  auto work = std::make_shared<WorkState>();
  work->what = std::move(what);
  {
    const std::lock_guard lock(state_->mutex);
    if (state_->aborted) {
      work->complete(std::make_exception_ptr(
          Error(ErrorCategory::timeout, work->what + ": the " + state_->name + " was aborted by an earlier timeout (" +
                                            state_->abort_reason + ")")));
      return Work(work);
    }
    state_->queue.push_back({work, std::move(call)});
    ++state_->queued;
  }
  state_->changed.notify_all();
  return Work(work);
}

void CallQueue::run(std::string what, std::function<void()> call) { enqueue(std::move(what), std::move(call)).wait(); }

bool CallQueue::aborted() const {
  const std::lock_guard lock(state_->mutex);
  return state_->aborted;
}

}  // namespace loom::comm::backend
