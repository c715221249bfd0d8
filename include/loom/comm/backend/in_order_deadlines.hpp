// The deadlines of calls that complete in the order they were submitted, as on a GPU stream (the
// NCCL backend's). The oldest call in flight must complete within the timeout of becoming the
// oldest: of its submission if nothing was in flight then, else of the completion of the call
// before it. Not of its start on the device, which never comes when a kernel queued before it hangs
// (the stream never reaches the call): such a call still times out. Later calls wait behind the
// oldest without deadlines of their own, so a long queue of healthy calls never times out.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>

namespace loom::comm::backend {

class InOrderDeadlines {
 public:
  using Clock = std::chrono::steady_clock;

  explicit InOrderDeadlines(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void submitted(Clock::time_point now);
  // The oldest call completed at `now` (the next one is the oldest from now on).
  void completed(Clock::time_point now);
  void clear() { in_flight_ = 0; }  // every call ended at once (an abort)

  std::size_t in_flight() const { return in_flight_; }
  // When the oldest call times out; nullopt when nothing is in flight.
  std::optional<Clock::time_point> deadline() const;
  bool expired(Clock::time_point now) const;

 private:
  std::chrono::milliseconds timeout_;
  std::size_t in_flight_ = 0;
  Clock::time_point oldest_since_{};
};

}  // namespace loom::comm::backend
