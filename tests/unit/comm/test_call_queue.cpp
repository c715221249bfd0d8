// backend::CallQueue: calls in order on the worker, or (an inline queue) on the thread that waits;
// a call nobody waits for still runs; aborts through the handle; the watchdog.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/comm/backend/call_queue.hpp"
#include "loom/core/error.hpp"

using loom::comm::Work;
using loom::comm::backend::CallQueue;
using namespace std::chrono_literals;

namespace {

// Records which thread ran each call, in the order they ran.
struct Log {
  std::mutex mutex;
  std::vector<std::pair<int, std::thread::id>> runs;
  void add(int call) {
    const std::lock_guard lock(mutex);
    runs.emplace_back(call, std::this_thread::get_id());
  }
};

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("an inline call queue runs a call on the thread that waits for it, in order with the rest", "[comm][queue]") {
  // A grace far longer than this test, so that the worker never takes a call before the wait below
  // (with the default 20 us, a busy machine that preempts this thread between the enqueues and the
  // wait lets the worker run them, which is also correct but not what this test is about).
  CallQueue queue("test queue", 0ms, true, std::chrono::seconds(60));
  Log log;
  std::vector<std::string> names(3);
  std::vector<Work> works;
  for (int call = 0; call < 3; ++call) {
    works.push_back(queue.enqueue_named("call " + std::to_string(call), [&log, &names, call](const std::string& what) {
      names[static_cast<std::size_t>(call)] = what;  // the Work's own description
      log.add(call);
    }));
  }
  works.back().wait();  // runs calls 0, 1 and 2 here
  REQUIRE(log.runs.size() == 3);
  for (int call = 0; call < 3; ++call) {
    REQUIRE(log.runs[static_cast<std::size_t>(call)].first == call);
    REQUIRE(names[static_cast<std::size_t>(call)] == "call " + std::to_string(call));
  }
  for (const auto& run : log.runs) REQUIRE(run.second == std::this_thread::get_id());
  for (const Work& work : works) REQUIRE(work.is_completed());
}

TEST_CASE("an inline call queue still runs calls nobody waits for", "[comm][queue]") {
  CallQueue queue("test queue", 0ms, true);
  std::atomic<int> ran{0};
  // The first call is waited for at once (it runs here); the next is not: the worker, asleep since
  // the last call ran inline, is not woken by its enqueue, and starts it when nudged.
  queue.enqueue("first", [&] { ++ran; }).wait();
  const Work lone = queue.enqueue("lone", [&] { ++ran; });
  std::this_thread::sleep_for(20ms);
  queue.handle().nudge(10ms);
  REQUIRE(eventually([&] { return lone.is_completed(); }));
  // Calls that pile up without a wait wake the worker themselves.
  std::vector<Work> works;
  for (int i = 0; i < 4; ++i) works.push_back(queue.enqueue("piled", [&] { ++ran; }));
  REQUIRE(eventually([&] { return works.back().is_completed(); }));
  REQUIRE(ran == 6);
}

TEST_CASE("a plain call queue runs every call on its worker", "[comm][queue]") {
  CallQueue queue("test queue", 0ms);
  std::thread::id ran_on;
  queue.enqueue("call", [&] { ran_on = std::this_thread::get_id(); }).wait();
  REQUIRE(ran_on != std::thread::id());
  REQUIRE(ran_on != std::this_thread::get_id());
}

TEST_CASE("a call queue's handle aborts the running call, the queued ones and later ones", "[comm][queue]") {
  CallQueue queue("test queue", 0ms);
  std::atomic<bool> release{false}, started{false};
  const Work running = queue.enqueue("running call", [&] {
    started = true;
    while (!release) std::this_thread::sleep_for(1ms);
  });
  const Work queued = queue.enqueue("queued call", [] {});
  REQUIRE(eventually([&] { return started.load(); }));
  const std::string detail = "a peer is gone";
  queue.handle().abort(loom::ErrorCategory::timeout, "it timed out", &detail);
  REQUIRE_THROWS_WITH(running.wait(), Catch::Contains("running call: a peer is gone"));
  REQUIRE_THROWS_WITH(queued.wait(), Catch::Contains("queued call: not run: the test queue was aborted by an earlier "
                                                     "timeout (it timed out)"));
  REQUIRE_THROWS_WITH(queue.enqueue("later call", [] {}).wait(), Catch::Contains("later call: the test queue was aborted"));
  REQUIRE(queue.aborted());
  release = true;
}

TEST_CASE("a call queue's watchdog fails a call that runs too long and aborts the queue", "[comm][queue]") {
  CallQueue queue("test queue", 50ms);
  std::atomic<bool> release{false};
  const auto start = std::chrono::steady_clock::now();
  const Work slow = queue.enqueue("slow call", [&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  REQUIRE_THROWS_WITH(slow.wait(), Catch::Contains("slow call: not completed within 50 ms"));
  REQUIRE(std::chrono::steady_clock::now() - start < 1s);
  REQUIRE_THROWS_WITH(queue.enqueue("next", [] {}).wait(), Catch::Contains("aborted by an earlier timeout"));
  release = true;
}
