#include "loom/train/stop.hpp"

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"

namespace loom::train {

namespace {

constexpr int watched[] = {SIGTERM, SIGINT, SIGUSR1};

std::atomic<int> received_signal{0};
std::atomic<long long> received_at_ns{0};  // CLOCK_MONOTONIC
std::atomic<bool> installed{false};
struct sigaction previous[3];

long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

// Records the first signal (its time first, so a poll never sees a signal without its time). A
// second one more than a second later restores the default action and raises it again; one within
// the second is taken for the same notice delivered twice (to the process group and forwarded by
// the launcher) and ignored.
extern "C" void record_stop_signal(int signal_number) {
  const long long now = monotonic_ns();
  long long unset = 0;
  received_at_ns.compare_exchange_strong(unset, now);
  int expected = 0;
  if (received_signal.compare_exchange_strong(expected, signal_number)) return;
  if (now - received_at_ns.load() < 1000000000LL) return;
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal_number, &default_action, nullptr);
  raise(signal_number);
}

}  // namespace

std::string StopRequest::describe() const {
  switch (reason) {
    case StopReason::none: return "nothing";
    case StopReason::time_limit: return "the time limit";
    case StopReason::signal: {
      const char* name = signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : signal == SIGUSR1 ? "SIGUSR1" : nullptr;
      return name != nullptr ? name : "signal " + std::to_string(signal);
    }
  }
  return "unknown";
}

StopRequests::StopRequests(double time_limit_seconds)
    : deadline_(std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(time_limit_seconds > 0 && time_limit_seconds <= 1e9 ? time_limit_seconds : 0))),
      has_deadline_(time_limit_seconds > 0 && time_limit_seconds <= 1e9) {
  require(time_limit_seconds >= 0 && time_limit_seconds <= 1e9, "StopRequests: the time limit must be in [0, 1e9] s, got ",
          time_limit_seconds, " s");
  bool expected = false;
  require(installed.compare_exchange_strong(expected, true), "StopRequests: only one may exist at a time");
  received_signal.store(0);
  received_at_ns.store(0);
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a system call the signal interrupts goes on
  for (std::size_t i = 0; i < std::size(watched); ++i) {
    if (sigaction(watched[i], &action, &previous[i]) != 0) {
      for (std::size_t j = 0; j < i; ++j) sigaction(watched[j], &previous[j], nullptr);
      installed.store(false);
      fail(ErrorCategory::invalid_argument, "StopRequests: sigaction failed: ", std::strerror(errno));
    }
  }
}

StopRequests::~StopRequests() {
  for (std::size_t i = 0; i < std::size(watched); ++i) sigaction(watched[i], &previous[i], nullptr);
  installed.store(false);
}

StopRequest StopRequests::poll(comm::Communicator* comm) const {
  StopRequest request;
  const int signal_number = received_signal.load();
  const auto now = std::chrono::steady_clock::now();
  if (signal_number != 0) {
    request.reason = StopReason::signal;
    request.signal = signal_number;
    const long long at = received_at_ns.load();
    request.seconds_since = at != 0 ? static_cast<double>(monotonic_ns() - at) * 1e-9 : 0.0;
  } else if (has_deadline_ && now >= deadline_) {
    request.reason = StopReason::time_limit;
    request.seconds_since = std::chrono::duration<double>(now - deadline_).count();
  }
  if (comm == nullptr || comm->size() == 1) return request;
  const std::vector<std::int64_t> agreed =
      comm::all_reduce_values(*comm, {static_cast<std::int64_t>(request.reason), request.signal}, comm::ReduceOp::max);
  if (agreed[0] != static_cast<std::int64_t>(request.reason)) request.seconds_since = 0;  // another rank's reason
  request.reason = static_cast<StopReason>(agreed[0]);
  request.signal = request.reason == StopReason::signal ? static_cast<int>(agreed[1]) : 0;
  return request;
}

}  // namespace loom::train
