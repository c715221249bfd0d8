// The ordered, asynchronous executor behind the CPU backends: calls run one after another on a
// worker thread (or, on an inline queue, on the thread that waits for them), each completing the
// Work it returned. With a watchdog timeout, a call that runs
// longer than that fails with a timeout Error, the queue is aborted (queued and later calls fail
// at once), and a worker stuck in a call that never returns is abandoned instead of joined, so
// that nothing hangs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "loom/comm/work.hpp"
#include "loom/core/error.hpp"

namespace loom::comm::backend {

// How long the worker leaves a fresh call on an inline queue to the thread that waits for it.
inline constexpr std::chrono::microseconds default_inline_grace{20};

class CallQueue {
 public:
  // watchdog_timeout zero: no watchdog (the calls bound their own waits). inline_calls: a thread
  // that waits for a call not yet started runs it (and the calls queued before it) itself, in
  // order, instead of handing it to the worker and back; the worker starts a call that nobody
  // waits for once it is `inline_grace` old (or, if nothing wakes it, when Handle::nudge is
  // called). For calls that never block past their own timeout.
  CallQueue(std::string name, std::chrono::milliseconds watchdog_timeout, bool inline_calls = false,
            std::chrono::microseconds inline_grace = default_inline_grace);
  ~CallQueue();
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  Work enqueue(std::string what, std::function<void()> call);
  // As enqueue, the call being given its description (the Work's own, no copy).
  Work enqueue_named(std::string what, std::function<void(const std::string& what)> call);
  // enqueue, then wait.
  void run(std::string what, std::function<void()> call);
  // True once a call has timed out or the queue was aborted (whatever happened to the call afterwards).
  bool aborted() const;

  struct State;

  // The queue as seen from a backend's own thread (a watcher), usable as long as it exists, even
  // after the queue has been destroyed (it then does nothing that matters).
  class Handle {
   public:
    // Aborts the queue: queued and later calls fail at once naming `reason`; with current_detail,
    // so does the running call, with Error(category, "<its what>: <current_detail>") (without, it
    // is left to end by itself). The first abort wins.
    void abort(ErrorCategory category, const std::string& reason, const std::string* current_detail) const;
    // On an inline queue: starts the first queued call if it has waited longer than `older_than`
    // with nobody running it (a call that was neither waited for nor followed by another).
    void nudge(std::chrono::milliseconds older_than) const;

   private:
    friend class CallQueue;
    explicit Handle(std::shared_ptr<State> state) : state_(std::move(state)) {}
    std::shared_ptr<State> state_;
  };
  Handle handle() const;

 private:
  std::shared_ptr<State> state_;
};

// True once any CallQueue in the process has abandoned a worker stuck in a call (MPI must then
// not be finalized: that would wait for the stuck call).
bool calls_were_abandoned();
// Records that a call was left pending inside a backend (e.g. a nonblocking MPI request that timed
// out and never completed), with the same consequence.
void note_abandoned_call();

}  // namespace loom::comm::backend
