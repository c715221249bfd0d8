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

using Clock = std::chrono::steady_clock;
// The worker's rhythm: after a call it polls (yielding) for `hot`, then sleeps until enqueue wakes
// it. On an inline queue, enqueue wakes it only when calls are not being waited for at once (the
// queue already holds calls, or the last one was left to the worker): waking a thread costs about
// 2 us of futex on a small VM, as much as a small collective, and on a rank bound to one core it
// also preempts the thread that communicates. A call nobody waits for and nothing follows is
// started by nudge() (the backend's periodic thread). The worker leaves a call its queue's grace
// (default_inline_grace) to the thread that waits for it.
constexpr auto hot = std::chrono::microseconds(50);

struct Call {
  std::shared_ptr<WorkState> work;
  std::function<void(const std::string&)> body;
  Clock::time_point queued_at;
};

// Runs a call's body, returning its failure (an exception must not leave the thread).
std::exception_ptr run_body(Call& call) {
  std::exception_ptr failure;
  try {
    call.body(call.work->what);
  } catch (...) {
    failure = std::current_exception();
  }
  call.body = nullptr;  // release the call's captures before the caller learns it is done
  return failure;
}
}  // namespace

bool calls_were_abandoned() { return abandoned_any.load(); }

void note_abandoned_call() { abandoned_any.store(true); }

struct CallQueue::State {
  std::string name;
  std::chrono::milliseconds timeout;
  bool inline_calls = false;
  std::chrono::microseconds grace{0};
  std::mutex mutex;
  std::condition_variable changed;        // an abort, the worker's exit (for the destructor)
  std::condition_variable wake;           // work for the worker, or stopping
  std::condition_variable watch_changed;  // stopping, for the watchdog
  std::deque<Call> queue;
  std::atomic<int> queued{0};  // queue.size(), for the worker's brief spin
  std::shared_ptr<WorkState> current;
  Clock::time_point started;
  bool worker_asleep = false;     // waiting for enqueue to wake it
  bool last_ran_inline = false;   // the last call finished ran on the thread that waited for it
  bool stopping = false, worker_exited = false, aborted = false;
  ErrorCategory abort_category = ErrorCategory::timeout;
  std::string abort_reason;

  void fail_queued_locked(ErrorCategory category, const std::string& reason) {
    for (Call& call : queue) {
      call.work->complete(std::make_exception_ptr(Error(category, call.work->what + ": " + reason)));
    }
    queue.clear();
    queued = 0;
  }

  // The running call fails with `current_error` (if given), queued calls and later ones with `reason`.
  void abort_locked(ErrorCategory category, const std::string* current_error, const std::string& reason) {
    if (aborted) return;
    aborted = true;
    abort_category = category;
    abort_reason = reason;
    if (current && current_error) current->complete(std::make_exception_ptr(Error(category, *current_error)));
    fail_queued_locked(category, "not run: " + aborted_by());
    changed.notify_all();
  }

  std::string aborted_by() const {
    return "the " + name + " was aborted by an earlier " +
           (abort_category == ErrorCategory::timeout ? "timeout" : "error") + " (" + abort_reason + ")";
  }

  // Whether the worker may start the front call now: nothing runs, and on an inline queue the
  // call has waited its grace for a thread that waits for it.
  bool startable_locked(Clock::time_point now) const {
    if (queue.empty() || current) return false;
    return stopping || !inline_calls || now - queue.front().queued_at >= grace;
  }

  // Pops the front call as the running one.
  Call start_locked() {
    Call call = std::move(queue.front());
    queue.pop_front();
    --queued;
    current = call.work;
    if (timeout.count() > 0) started = Clock::now();  // for the watchdog alone
    return call;
  }

  void finish(Call& call, std::exception_ptr failure, bool ran_inline) {
    bool more = false;
    {
      const std::lock_guard lock(mutex);
      current = nullptr;
      last_ran_inline = ran_inline;
      more = !queue.empty() || stopping;
    }
    call.work->complete(failure);
    // Only if the worker has something to do: waking it costs a futex, and on a rank bound to one
    // core a context switch, per call.
    if (more) wake.notify_all();
  }

  // Waits until a call can be started or the queue stops (then false).
  bool wait_for_call(std::unique_lock<std::mutex>& lock) {
    const auto idle_since = Clock::now();
    for (;;) {
      const auto now = Clock::now();
      if (startable_locked(now)) return true;
      if (stopping && queue.empty() && !current) return false;
      if (now - idle_since < hot) {  // just after a call: the next is likely soon
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      } else if (!queue.empty() && !current) {  // an inline call within its grace
        wake.wait_until(lock, queue.front().queued_at + grace);
      } else {
        worker_asleep = true;
        wake.wait(lock);
        worker_asleep = false;
      }
    }
  }

  void work_loop() {
    std::unique_lock lock(mutex);
    for (;;) {
      if (!wait_for_call(lock)) break;
      Call call = start_locked();
      lock.unlock();
      finish(call, run_body(call), false);
      lock.lock();
    }
    worker_exited = true;
    changed.notify_all();
    watch_changed.notify_all();
  }

  // Work::wait's help on an inline queue: runs the queued calls up to and including `work` on the
  // waiting thread, in order, unless another call is running (then it waits as usual).
  static void help(const std::shared_ptr<void>& owner, WorkState& work) {
    auto& state = *static_cast<State*>(owner.get());
    std::unique_lock lock(state.mutex);
    while (!work.done.load(std::memory_order_acquire) && !state.queue.empty() && !state.current) {
      Call call = state.start_locked();
      lock.unlock();
      state.finish(call, run_body(call), true);
      if (call.work.get() == &work) return;
      lock.lock();
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
      const std::string reason = current->what + ": " + not_completed_within(timeout) + "; the " + name + " is aborted";
      abort_locked(ErrorCategory::timeout, &reason, reason);
    }
  }

  std::thread worker, watchdog;
};

CallQueue::CallQueue(std::string name, std::chrono::milliseconds watchdog_timeout, bool inline_calls,
                     std::chrono::microseconds inline_grace)
    : state_(std::make_shared<State>()) {
  require(watchdog_timeout.count() >= 0, name, ": the timeout must not be negative");
  require(inline_grace.count() >= 0, name, ": the inline grace must not be negative");
  state_->name = std::move(name);
  state_->timeout = watchdog_timeout;
  state_->inline_calls = inline_calls;
  state_->grace = inline_grace;
  state_->worker = std::thread([s = state_] { s->work_loop(); });
  if (watchdog_timeout.count() > 0) state_->watchdog = std::thread([s = state_] { s->watch_loop(); });
}

CallQueue::~CallQueue() {
  std::unique_lock lock(state_->mutex);
  state_->stopping = true;
  state_->wake.notify_all();
  state_->watch_changed.notify_all();
  // Queued calls still run (their peers may be about to join); a stuck one ends by timing out,
  // and is then given a moment (at most a second) to return before its thread is abandoned.
  state_->changed.wait(lock, [&] { return state_->worker_exited || (state_->aborted && state_->current); });
  if (!state_->worker_exited) {
    // Without a watchdog the backend aborted the call itself, and a call that is not stuck inside
    // the backend returns soon after.
    const std::chrono::milliseconds grace = state_->timeout.count() == 0
                                                ? std::chrono::seconds(1)
                                                : std::min<std::chrono::milliseconds>(state_->timeout, std::chrono::seconds(1));
    state_->changed.wait_for(lock, grace, [&] { return state_->worker_exited; });
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
  return enqueue_named(std::move(what), [call = std::move(call)](const std::string&) { call(); });
}

Work CallQueue::enqueue_named(std::string what, std::function<void(const std::string&)> call) {
  auto work = std::make_shared<WorkState>();
  work->what = std::move(what);
  bool wake = false;
  {
    const std::lock_guard lock(state_->mutex);
    if (state_->aborted) {
      work->complete(std::make_exception_ptr(Error(state_->abort_category, work->what + ": " + state_->aborted_by())));
      return Work(work);
    }
    const bool waited_at_once = state_->queue.empty() && state_->last_ran_inline;
    state_->queue.push_back({work, std::move(call), Clock::now()});
    ++state_->queued;
    if (state_->inline_calls) {
      work->help = &State::help;
      work->helper = state_;
    }
    // A yielding worker finds the call itself; a sleeping one is woken unless the caller is
    // likely to run the call itself.
    wake = state_->worker_asleep && (!state_->inline_calls || !waited_at_once);
  }
  if (wake) state_->wake.notify_all();
  return Work(work);
}

void CallQueue::run(std::string what, std::function<void()> call) { enqueue(std::move(what), std::move(call)).wait(); }

bool CallQueue::aborted() const {
  const std::lock_guard lock(state_->mutex);
  return state_->aborted;
}

CallQueue::Handle CallQueue::handle() const { return Handle(state_); }

void CallQueue::Handle::nudge(std::chrono::milliseconds older_than) const {
  {
    const std::lock_guard lock(state_->mutex);
    if (state_->queue.empty() || state_->current || !state_->worker_asleep ||
        Clock::now() - state_->queue.front().queued_at < older_than) {
      return;
    }
  }
  state_->wake.notify_all();
}

void CallQueue::Handle::abort(ErrorCategory category, const std::string& reason,
                               const std::string* current_detail) const {
  const std::lock_guard lock(state_->mutex);
  std::string current;
  if (state_->current && current_detail) current = state_->current->what + ": " + *current_detail;
  state_->abort_locked(category, current_detail ? &current : nullptr, reason);
}

}  // namespace loom::comm::backend
