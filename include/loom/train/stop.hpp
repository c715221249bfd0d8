// Stopping a training loop early without losing work: preemption notices (SIGTERM from spot and
// preemptible instances, SIGINT from Ctrl-C, SIGUSR1 from schedulers such as SLURM's --signal)
// and a wall-clock limit. The signal handler only records the signal and its time; the training
// thread asks at each step boundary, and with a communicator the ranks agree (one small
// all-reduce), so every rank stops after the same step even when the signal reached only some of
// them. A second signal ends the process at once, with the signal's default action.
#pragma once

#include <chrono>
#include <string>

#include "loom/comm/communicator.hpp"

namespace loom::train {

enum class StopReason { none, time_limit, signal };

struct StopRequest {
  StopReason reason = StopReason::none;
  int signal = 0;                 // the signal, when reason is signal (agreed: the highest number any rank got)
  double seconds_since = 0;       // since this rank received it (0 when it did not) or the limit passed
  explicit operator bool() const noexcept { return reason != StopReason::none; }
  std::string describe() const;   // "SIGTERM", "the time limit"
};

// One instance per process at a time (a second is an Error); the previous handlers are restored
// when it is destroyed.
class StopRequests {
 public:
  // time_limit_seconds > 0: a stop is requested once that much wall time has passed since
  // construction (set it below the scheduler's limit, leaving time to save).
  explicit StopRequests(double time_limit_seconds = 0);
  ~StopRequests();
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;

  // Whether to stop now. With comm it is a collective (call it at the same point on every rank):
  // the answer is agreed over the ranks.
  StopRequest poll(comm::Communicator* comm = nullptr) const;

 private:
  std::chrono::steady_clock::time_point deadline_;
  bool has_deadline_;
};

}  // namespace loom::train
