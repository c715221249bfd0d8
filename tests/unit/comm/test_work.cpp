// Work::on_complete: the callback runs once, at once on a completed operation, and otherwise on
// the thread that completes it, before waiters see it done; a failure completes it too, and a
// callback that throws still completes the operation.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "loom/comm/work.hpp"

TEST_CASE("Work::on_complete runs once, when the operation completes", "[comm]") {
  int calls = 0;
  loom::comm::Work().on_complete([&](const loom::comm::Completion&) { ++calls; });  // a default Work is complete: at once
  CHECK(calls == 1);

  auto state = std::make_shared<loom::comm::detail::WorkState>();
  const loom::comm::Work work(state);
  std::atomic<std::thread::id> ran_on{};
  work.on_complete([&](const loom::comm::Completion&) {
    ++calls;
    ran_on = std::this_thread::get_id();
  });
  CHECK(calls == 1);  // not yet
  std::thread completer([&] { state->complete(std::make_exception_ptr(std::runtime_error("broken"))); });
  completer.join();
  CHECK(calls == 2);
  CHECK(ran_on.load() != std::this_thread::get_id());
  CHECK_THROWS_WITH(work.wait(), "broken");
  state->complete(nullptr);  // a second completion changes nothing and calls nothing
  CHECK(calls == 2);
  work.on_complete([&](const loom::comm::Completion&) { ++calls; });  // after completion: at once
  CHECK(calls == 3);

  auto throwing = std::make_shared<loom::comm::detail::WorkState>();
  const loom::comm::Work thrown(throwing);
  thrown.on_complete([](const loom::comm::Completion&) { throw std::runtime_error("a broken tracer"); });
  throwing->complete(nullptr);
  CHECK(thrown.is_completed());
  CHECK_NOTHROW(thrown.wait());
}

TEST_CASE("Work::on_complete reports success and the backend's device time", "[comm]") {
  using loom::comm::Completion;
  std::optional<Completion> seen;
  loom::comm::Work().on_complete([&](const Completion& c) { seen = c; });
  REQUIRE(seen);
  CHECK(seen->succeeded);
  CHECK_FALSE(seen->device_seconds);  // nothing ran on a device

  auto timed = std::make_shared<loom::comm::detail::WorkState>();
  const loom::comm::Work work(timed);
  seen.reset();
  work.on_complete([&](const Completion& c) { seen = c; });
  timed->device_seconds = 0.25;  // what a GPU backend sets before completing
  timed->complete(nullptr);
  REQUIRE(seen);
  CHECK(seen->succeeded);
  CHECK(seen->device_seconds == 0.25);
  seen.reset();
  work.on_complete([&](const Completion& c) { seen = c; });  // late: the same report
  REQUIRE(seen);
  CHECK(seen->device_seconds == 0.25);

  auto failed = std::make_shared<loom::comm::detail::WorkState>();
  const loom::comm::Work broken(failed);
  CHECK(broken.error() == nullptr);
  seen.reset();
  bool done_inside = true;
  broken.on_complete([&](const Completion& c) {  // the callback that complete(failure) runs
    seen = c;
    done_inside = broken.is_completed();
  });
  failed->complete(std::make_exception_ptr(std::runtime_error("peer gone")));
  REQUIRE(seen);
  CHECK_FALSE(seen->succeeded);  // the failure is known to the callback, before waiters see it done
  CHECK_FALSE(done_inside);
  seen.reset();
  broken.on_complete([&](const Completion& c) { seen = c; });
  REQUIRE(seen);
  CHECK_FALSE(seen->succeeded);
  CHECK(broken.error() != nullptr);
}
