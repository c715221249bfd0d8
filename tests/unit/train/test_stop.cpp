// Stop requests: a signal is recorded, not acted on, and reported at the next poll with its name
// and age; the time limit likewise; the previous handlers return afterwards; and across ranks the
// verdict is agreed (tests/dist: a signal to one process stops both).
#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "loom/train/stop.hpp"
#include "support/tensor_checks.hpp"

using loom::train::StopReason;
using loom::train::StopRequests;

namespace {

std::atomic<int> previous_handler_calls{0};
extern "C" void count_call(int) { previous_handler_calls.fetch_add(1); }

}  // namespace

TEST_CASE("a signal becomes a stop request at the next poll, and the old handler comes back", "[train][stop]") {
  struct sigaction counting {}, saved {};
  counting.sa_handler = count_call;
  sigemptyset(&counting.sa_mask);
  sigaction(SIGUSR1, &counting, &saved);
  {
    const StopRequests stops;
    CHECK_FALSE(stops.poll());
    CHECK_THROWS_MATCHES(StopRequests(), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument, {"only one"}));
    raise(SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const loom::train::StopRequest request = stops.poll();
    CHECK(request.reason == StopReason::signal);
    CHECK(request.signal == SIGUSR1);
    CHECK(request.describe() == "SIGUSR1");
    CHECK(request.seconds_since >= 0.015);
    CHECK(request.seconds_since < 5.0);
    CHECK(previous_handler_calls.load() == 0);  // recorded, not passed on
  }
  raise(SIGUSR1);  // the previous handler is back
  CHECK(previous_handler_calls.load() == 1);
  sigaction(SIGUSR1, &saved, nullptr);
}

TEST_CASE("the time limit requests a stop once it has passed", "[train][stop]") {
  const StopRequests stops(0.05);
  CHECK_FALSE(stops.poll());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  const loom::train::StopRequest request = stops.poll();
  CHECK(request.reason == StopReason::time_limit);
  CHECK(request.describe() == "the time limit");
  for (double bad : {-1.0, 1e300}) {
    CHECK_THROWS_MATCHES(StopRequests(bad), loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument, {"must be in [0, 1e9] s"}));
  }
}
