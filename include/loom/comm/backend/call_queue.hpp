// The ordered, asynchronous executor behind the CPU backends: calls run one after another on a
// worker thread, each completing the Work it returned. With a watchdog timeout, a call that runs
// longer than that fails with a timeout Error, the queue is aborted (queued and later calls fail
// at once), and a worker stuck in a call that never returns is abandoned instead of joined, so
// that nothing hangs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "loom/comm/work.hpp"

namespace loom::comm::backend {

class CallQueue {
 public:
  // watchdog_timeout zero: no watchdog (the calls bound their own waits).
  CallQueue(std::string name, std::chrono::milliseconds watchdog_timeout);
  ~CallQueue();
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  Work enqueue(std::string what, std::function<void()> call);
  // enqueue, then wait.
  void run(std::string what, std::function<void()> call);
  // True once a call has timed out (whatever happened to it afterwards).
  bool aborted() const;

  struct State;

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
