// The in-process backend: every collective x dtype x op x size (0, 1, odd, not divisible by the
// rank count) x 1..5 ranks, out of place and in place, on crafted inputs whose results are exact
// in every dtype; asynchrony; a peer that never arrives (timeout, then an aborted communicator);
// bad arguments. Catch2's assertions are not thread-safe, so rank threads only record failures
// (first_failure) and the test thread asserts on them.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/numeric.hpp"
#include "support/comm_conformance.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;
using loom::test::IsError;

namespace {

// What a Work's wait() threw: "timeout: ...", "invalid argument: ..." or "no error".
std::string outcome(const loom::comm::Work& work) {
  try {
    work.wait();
  } catch (const loom::Error& e) {
    return std::string(to_string(e.category())) + ": " + e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("in-process communicators pass the conformance suite at 1 to 5 ranks", "[comm]") {
  for (int size = 1; size <= 5; ++size) {
    loom::test::ConformanceSizes sizes;
    if (size != 2 && size != 5) sizes.large = 0;  // several MiB at 2 and 5 ranks keeps the test quick
    std::vector<std::string> failures(static_cast<std::size_t>(size));
    loom::comm::run_in_process(size, [&](Communicator& comm) {
      failures[static_cast<std::size_t>(comm.rank())] = loom::test::run_comm_conformance(comm, sizes);
    });
    for (int r = 0; r < size; ++r) {
      INFO("ranks: " << size << ", rank " << r << ": " << failures[static_cast<std::size_t>(r)]);
      REQUIRE(failures[static_cast<std::size_t>(r)].empty());
    }
  }
}

TEST_CASE("in-process calls are asynchronous: a collective completes when the last rank joins", "[comm]") {
  auto comms = loom::comm::make_in_process_communicators(2);
  const Tensor a = Tensor::full({3}, DType::f32, 1), b = Tensor::full({3}, DType::f32, 2);
  const loom::comm::Work first = comms[0]->all_reduce(a, a, ReduceOp::sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_FALSE(first.is_completed());
  REQUIRE_THROWS_MATCHES(first.wait(std::chrono::milliseconds(10)), loom::Error,
                         IsError(ErrorCategory::timeout, {"all_reduce", "rank 0", "did not complete"}));
  const loom::comm::Work second = comms[1]->all_reduce(b, b, ReduceOp::sum);
  // On the CPU a stream waiting for a call is the host waiting: the result is there afterwards.
  first.wait_on({});
  REQUIRE(first.is_completed());
  REQUIRE(a.to_vector<float>() == std::vector<float>{3, 3, 3});
  second.wait();
  REQUIRE(b.to_vector<float>() == std::vector<float>{3, 3, 3});
}

TEST_CASE("a peer that never arrives gives a timeout on the others, then the communicator is aborted", "[comm]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(200);
  std::vector<std::string> first(3), second(3);
  const auto start = std::chrono::steady_clock::now();
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    if (comm.rank() == 2) return;  // never joins
    const Tensor t = Tensor::full({4}, DType::f32, 1);
    first[static_cast<std::size_t>(comm.rank())] = outcome(comm.all_reduce(t, t, ReduceOp::sum));
    second[static_cast<std::size_t>(comm.rank())] = outcome(comm.barrier());
  }, options);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << first[static_cast<std::size_t>(r)] << " / " << second[static_cast<std::size_t>(r)]);
    REQUIRE_THAT(first[static_cast<std::size_t>(r)], Catch::StartsWith("timeout: ") && Catch::Contains("all_reduce"));
    REQUIRE_THAT(second[static_cast<std::size_t>(r)], Catch::StartsWith("timeout: ") && Catch::Contains("aborted"));
  }
  // The rank that noticed first names how many ranks came; the other may see the abort.
  REQUIRE((first[0].find("of 3 ranks joined within 200 ms") != std::string::npos ||
           first[1].find("of 3 ranks joined within 200 ms") != std::string::npos));
}

TEST_CASE("a split with its own timeout keeps it, and the parent keeps its own", "[comm]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(300000);
  std::vector<std::string> child_outcome(2), parent_outcome(2);
  const auto start = std::chrono::steady_clock::now();
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const std::unique_ptr<Communicator> child = comm.split(0, comm.rank(), std::chrono::milliseconds(150));
    // Rank 1 does not join the child's call: rank 0 fails at the child's 150 ms, not the parent's 5 minutes.
    if (comm.rank() == 0) child_outcome[r] = outcome(child->barrier());
    const Tensor t = Tensor::full({3}, DType::f32, 1);
    parent_outcome[r] = outcome(comm.all_reduce(t, t, ReduceOp::sum));
  }, options);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE_THAT(child_outcome[0], Catch::StartsWith("timeout: ") && Catch::Contains("joined within 150 ms"));
  REQUIRE(parent_outcome == std::vector<std::string>{"no error", "no error"});
  auto comms = loom::comm::make_in_process_communicators(1);
  REQUIRE_THROWS_MATCHES(comms[0]->split(0, 0, std::chrono::milliseconds(0)), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"split", "timeout must be positive", "0 ms"}));
}

TEST_CASE("a rank that aborts fails its peers' calls at once with its reason, not at the timeout", "[comm]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(300000);
  std::vector<std::string> waiting(3), later(3);
  const auto start = std::chrono::steady_clock::now();
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    const Tensor t = Tensor::full({4}, DType::f32, 1);
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are waiting by now
      comm.abort("its forward failed: out of memory");
    } else {
      waiting[static_cast<std::size_t>(comm.rank())] = outcome(comm.all_reduce(t, t, ReduceOp::sum));
    }
    later[static_cast<std::size_t>(comm.rank())] = outcome(comm.barrier());
  }, options);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << waiting[static_cast<std::size_t>(r)] << " / " << later[static_cast<std::size_t>(r)]);
    if (r < 2) {
      REQUIRE_THAT(waiting[static_cast<std::size_t>(r)],
                   Catch::StartsWith("aborted: ") && Catch::Contains("all_reduce") &&
                       Catch::Contains("rank 2: its forward failed: out of memory"));
    }
    REQUIRE_THAT(later[static_cast<std::size_t>(r)],
                 Catch::StartsWith("aborted: ") && Catch::Contains("rank 2: its forward failed: out of memory"));
  }
}

TEST_CASE("in-process collectives reject bad arguments with clear errors", "[comm]") {
  // The checks throw synchronously, before anything is queued: one communicator is enough.
  auto comms = loom::comm::make_in_process_communicators(2);
  Communicator& comm = *comms[0];
  const Tensor f = Tensor::zeros({4}, DType::f32), i = Tensor::zeros({4}, DType::i32);
  REQUIRE_THROWS_MATCHES(comm.all_reduce(f, i, ReduceOp::sum), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"all_reduce", "differ in dtype"}));
  REQUIRE_THROWS_MATCHES(comm.all_reduce(f, Tensor::zeros({3}, DType::f32), ReduceOp::sum), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"input has 4 elements"}));
  REQUIRE_THROWS_MATCHES(comm.all_reduce(i, i, ReduceOp::avg), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"avg needs a floating dtype"}));
  REQUIRE_THROWS_MATCHES(comm.broadcast(f, 2), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"root 2", "world of 2"}));
  REQUIRE_THROWS_MATCHES(comm.all_gather(f, Tensor::zeros({4}, DType::f32)), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"all_gather", "2 x the input's 4"}));
  REQUIRE_THROWS_MATCHES(comm.reduce_scatter(f, Tensor::zeros({3}, DType::f32), ReduceOp::sum), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"reduce_scatter", "expected 2 x"}));
}

TEST_CASE("in-process reduce, send, recv and split reject bad arguments", "[comm]") {
  auto comms = loom::comm::make_in_process_communicators(2);
  Communicator& comm = *comms[0];
  const Tensor f = Tensor::zeros({4}, DType::f32);
  REQUIRE_THROWS_MATCHES(comm.reduce(f, Tensor::zeros({4}, DType::i32), ReduceOp::sum, 0), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"reduce", "differ in dtype"}));
  REQUIRE_THROWS_MATCHES(comm.reduce(f, f, ReduceOp::sum, -1), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"reduce", "root -1"}));
  REQUIRE_THROWS_MATCHES(comm.send(f, 0), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"send", "peer 0 must be another rank"}));
  REQUIRE_THROWS_MATCHES(comm.recv(f, 5), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"recv", "peer 5"}));
  REQUIRE_THROWS_MATCHES(comm.split(-3, 0), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"split", "color must be >= 0 or no_color"}));
}

TEST_CASE("a recv that does not match its send fails on both ranks, naming counts and dtypes", "[comm]") {
  std::vector<std::string> results(2);
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    if (comm.rank() == 0) results[r] = outcome(comm.send(Tensor::zeros({6}, DType::f32), 1));
    else results[r] = outcome(comm.recv(Tensor::zeros({5}, DType::f32), 0));
  });
  for (const std::string& result : results) {
    INFO(result);
    REQUIRE_THAT(result, Catch::StartsWith("invalid argument") && Catch::Contains("rank 0 sent 6 f32 elements") &&
                             Catch::Contains("rank 1 receives 5 f32"));
  }
}

TEST_CASE("a send that is never received times out and aborts the communicator", "[comm]") {
  loom::comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(150);
  std::string sent, later;
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    if (comm.rank() == 1) return;  // never receives
    sent = outcome(comm.send(Tensor::zeros({3}, DType::f32), 1));
    later = outcome(comm.barrier());
  }, options);
  REQUIRE_THAT(sent, Catch::StartsWith("timeout") && Catch::Contains("rank 1 did not receive within 150 ms"));
  REQUIRE_THAT(later, Catch::StartsWith("timeout") && Catch::Contains("aborted"));
}

TEST_CASE("LOOM_DEBUG_COLLECTIVES names the ranks and calls of a mismatch instead of hanging", "[comm]") {
  loom::comm::CommOptions options;
  options.check_collectives = true;
  options.timeout = std::chrono::seconds(20);
  std::vector<std::string> results(3);
  const auto start = std::chrono::steady_clock::now();
  loom::comm::run_in_process(3, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const Tensor t = Tensor::zeros({10}, DType::f32);
    comm.all_reduce(t, t, ReduceOp::sum).wait();  // matched: passes the check
    try {
      if (comm.rank() == 1) comm.broadcast(t, 0).wait();
      else if (comm.rank() == 2) comm.all_reduce(Tensor::zeros({12}, DType::bf16), Tensor::zeros({12}, DType::bf16), ReduceOp::max).wait();
      else comm.all_reduce(t, t, ReduceOp::sum).wait();
      results[r] = "no error";
    } catch (const loom::Error& e) {
      results[r] = e.what();
    }
  }, options);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  for (const std::string& result : results) {
    INFO(result);
    REQUIRE_THAT(result, Catch::Contains("collective mismatch on the in-process communicator of 3 ranks") &&
                             Catch::Contains("rank 0 called call #1 all_reduce(10 x f32, sum)") &&
                             Catch::Contains("rank 1 called call #1 broadcast(10 x f32, root 0)") &&
                             Catch::Contains("rank 2 called call #1 all_reduce(12 x bf16, max)"));
  }
}

TEST_CASE("LOOM_DEBUG_COLLECTIVES checks point-to-point pairs and split communicators", "[comm]") {
  loom::comm::CommOptions options;
  options.check_collectives = true;
  std::vector<std::string> p2p(2), child(4);
  loom::comm::run_in_process(4, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    if (comm.rank() < 2) {
      try {
        if (comm.rank() == 0) comm.send(Tensor::zeros({4}, DType::i64), 1).wait();
        else comm.recv(Tensor::zeros({4}, DType::i32), 0).wait();
        p2p[r] = "no error";
      } catch (const loom::Error& e) {
        p2p[r] = e.what();
      }
    }
    std::unique_ptr<Communicator> half = comm.split(comm.rank() / 2, 0);
    try {
      if (half->rank() == 0) half->barrier().wait();
      else half->all_gather(Tensor::zeros({2}, DType::f32), Tensor::zeros({4}, DType::f32)).wait();
      child[r] = "no error";
    } catch (const loom::Error& e) {
      child[r] = e.what();
    }
  }, options);
  for (const std::string& result : p2p) {
    INFO(result);
    REQUIRE_THAT(result, Catch::Contains("point-to-point mismatch") &&
                             Catch::Contains("rank 0 called send(4 x i64) to rank 1, which called recv(4 x i32)"));
  }
  for (const std::string& result : child) {
    INFO(result);
    REQUIRE_THAT(result, Catch::Contains("communicator of 2 ranks") && Catch::Contains("rank 0 called call #0 barrier()") &&
                             Catch::Contains("rank 1 called call #0 all_gather(2 x f32)"));
  }
}

TEST_CASE("LOOM_COMM_TIMEOUT_MS sets the default timeout, and a bad value is named", "[comm]") {
  ::unsetenv("LOOM_COMM_TIMEOUT_MS");
  CHECK(loom::comm::CommOptions{}.timeout == std::chrono::minutes(5));
  ::setenv("LOOM_COMM_TIMEOUT_MS", "150", 1);
  const loom::comm::CommOptions options;
  CHECK(options.timeout == std::chrono::milliseconds(150));
  // A peer that never arrives now fails within the environment's timeout.
  auto comms = loom::comm::make_in_process_communicators(2, options);
  const loom::Tensor t = loom::Tensor::zeros({4}, loom::DType::f32);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(comms[0]->all_reduce(t, t, loom::comm::ReduceOp::sum).wait(), Catch::Contains("within 150 ms"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  for (const char* bad : {"0", "-5", "1.5", "soon"}) {
    ::setenv("LOOM_COMM_TIMEOUT_MS", bad, 1);
    CHECK_THROWS_MATCHES(loom::comm::CommOptions{}, loom::Error,
                         loom::test::IsError(loom::ErrorCategory::invalid_argument,
                                             {"LOOM_COMM_TIMEOUT_MS", std::string("'") + bad + "'"}));
  }
  ::unsetenv("LOOM_COMM_TIMEOUT_MS");
}
