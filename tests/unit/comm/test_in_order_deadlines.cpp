// backend::InOrderDeadlines (the NCCL backend's watcher): the oldest call's timeout runs from when
// it became the oldest, started on the device or not; calls behind it have none of their own.
#include <catch2/catch.hpp>

#include "loom/comm/backend/in_order_deadlines.hpp"

using loom::comm::backend::InOrderDeadlines;
using namespace std::chrono_literals;

TEST_CASE("a call that its stream never reaches still times out, from its submission", "[comm][nccl]") {
  InOrderDeadlines calls(100ms);
  const auto t0 = InOrderDeadlines::Clock::time_point{} + 1h;
  REQUIRE_FALSE(calls.deadline());
  calls.submitted(t0);  // a hung kernel before it: the call never starts, nothing ever completes
  REQUIRE(calls.deadline() == t0 + 100ms);
  REQUIRE_FALSE(calls.expired(t0 + 100ms));
  REQUIRE(calls.expired(t0 + 101ms));
}

TEST_CASE("calls queued behind the oldest wait without deadlines of their own", "[comm][nccl]") {
  InOrderDeadlines calls(100ms);
  const auto t0 = InOrderDeadlines::Clock::time_point{} + 1h;
  calls.submitted(t0);
  calls.submitted(t0 + 10ms);
  calls.submitted(t0 + 20ms);
  REQUIRE(calls.in_flight() == 3);
  REQUIRE(calls.deadline() == t0 + 100ms);  // the first's, from its submission
  // Each completes 90 ms after the one before it: a queue of 3 x 90 ms, never 100 ms for one call.
  calls.completed(t0 + 90ms);
  REQUIRE(calls.deadline() == t0 + 190ms);
  REQUIRE_FALSE(calls.expired(t0 + 150ms));
  calls.completed(t0 + 180ms);
  REQUIRE(calls.deadline() == t0 + 280ms);
  calls.completed(t0 + 270ms);
  REQUIRE_FALSE(calls.deadline());
  REQUIRE_FALSE(calls.expired(t0 + 10h));
  // A new call into an empty queue counts from its own submission.
  calls.submitted(t0 + 1000ms);
  REQUIRE(calls.deadline() == t0 + 1100ms);
  calls.clear();
  REQUIRE(calls.in_flight() == 0);
  REQUIRE_THROWS_WITH(calls.completed(t0), Catch::Contains("completed with none in flight"));
}
