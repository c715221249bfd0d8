// Work::on_complete: the callback runs once, at once on a completed operation, and otherwise on
// the thread that completes it, before waiters see it done; a failure completes it too, and a
// callback that throws still completes the operation.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>

#include "loom/comm/work.hpp"

TEST_CASE("Work::on_complete runs once, when the operation completes", "[comm]") {
  int calls = 0;
  loom::comm::Work().on_complete([&] { ++calls; });  // a default Work is complete: at once
  CHECK(calls == 1);

  auto state = std::make_shared<loom::comm::detail::WorkState>();
  const loom::comm::Work work(state);
  std::atomic<std::thread::id> ran_on{};
  work.on_complete([&] {
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
  work.on_complete([&] { ++calls; });  // after completion: at once
  CHECK(calls == 3);

  auto throwing = std::make_shared<loom::comm::detail::WorkState>();
  const loom::comm::Work thrown(throwing);
  thrown.on_complete([] { throw std::runtime_error("a broken tracer"); });
  throwing->complete(nullptr);
  CHECK(thrown.is_completed());
  CHECK_NOTHROW(thrown.wait());
}
