// The Gloo backend with ranks as threads of one process (each with its own Gloo device, connected
// over 127.0.0.1): the conformance suite at 1 to 4 ranks, a rank that never joins (the others fail
// at the timeout naming the call and that rank), a rank that aborts (the others fail at once with
// its reason), and a split. The processes case (torchrun's environment) is tests/dist's. Catch2's
// assertions are not thread-safe, so rank threads only record outcomes.
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/gloo.hpp"
#include "loom/core/error.hpp"
#include "support/comm_conformance.hpp"
#include "support/error_message.hpp"

using loom::DType;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;
using namespace std::chrono_literals;

namespace {

// Every thread's blob to every thread: a one-shot all-gather in memory.
class MemoryExchange {
 public:
  explicit MemoryExchange(int size) : blobs_(static_cast<std::size_t>(size)) {}
  loom::comm::BlobExchange for_rank(int rank) {
    return [this, rank](std::span<const unsigned char> mine) {
      std::unique_lock lock(mutex_);
      blobs_[static_cast<std::size_t>(rank)].assign(mine.begin(), mine.end());
      if (++arrived_ == static_cast<int>(blobs_.size())) changed_.notify_all();
      changed_.wait(lock, [&] { return arrived_ == static_cast<int>(blobs_.size()); });
      return blobs_;
    };
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  std::vector<std::vector<unsigned char>> blobs_;
};

// Runs body(comm) on `size` Gloo ranks, one thread each; returns what each recorded.
std::vector<std::string> run_gloo_ranks(int size, std::chrono::milliseconds timeout,
                                        const std::function<std::string(Communicator&)>& body) {
  MemoryExchange exchange(size);
  std::vector<std::string> results(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      std::string& result = results[static_cast<std::size_t>(rank)];
      try {
        loom::comm::CommOptions options;
        options.timeout = timeout;
        loom::comm::GlooOptions gloo;
        gloo.hostname = "127.0.0.1";
        std::unique_ptr<Communicator> comm =
            loom::comm::make_gloo_communicator(rank, size, exchange.for_rank(rank), gloo, options);
        result = body(*comm);
      } catch (const std::exception& e) {
        result = std::string("threw: ") + e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

std::string outcome(const std::function<void()>& call) { return loom::test::error_outcome(call); }

}  // namespace

TEST_CASE("Gloo communicators as threads pass the conformance suite at 1 to 4 ranks", "[comm][gloo]") {
  loom::test::ConformanceSizes sizes;
  sizes.large = 300007;  // past the direct limits: the ring
  for (int size = 1; size <= 4; ++size) {
    const std::vector<std::string> results = run_gloo_ranks(size, 30s, [&](Communicator& comm) {
      if (comm.backend() != "gloo") return std::string("backend ") + std::string(comm.backend());
      return loom::test::run_comm_conformance(comm, sizes);
    });
    for (int rank = 0; rank < size; ++rank) {
      INFO(size << " ranks, rank " << rank << ": " << results[static_cast<std::size_t>(rank)]);
      CHECK(results[static_cast<std::size_t>(rank)].empty());
    }
  }
}

TEST_CASE("a Gloo rank that never joins fails the others at the timeout, naming the call and the rank", "[comm][gloo]") {
  const std::vector<std::string> results = run_gloo_ranks(3, 600ms, [](Communicator& comm) -> std::string {
    Tensor t = Tensor::full({100000}, DType::f32, 1.0);
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(1500ms);  // past the others' timeout: they have told it by now
      return outcome([&] { comm.all_reduce(t, t, ReduceOp::sum).wait(); });
    }
    const auto start = std::chrono::steady_clock::now();
    std::string result = outcome([&] { comm.all_reduce(t, t, ReduceOp::sum).wait(); });
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return result + " | took " + std::to_string(took.count()) + " ms";
  });
  // Each waiting rank fails at its deadline: by its own timeout, or by the notice of the peer whose
  // deadline was seen first (a rank acts on a passed deadline a moment later, taking notices first).
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& result = results[static_cast<std::size_t>(rank)];
    INFO(result);
    const bool own = result.rfind("timeout", 0) == 0;
    CHECK((own || result.rfind("aborted", 0) == 0));
    CHECK_THAT(result, Catch::Contains("Gloo all_reduce #1 (rank " + std::to_string(rank)) &&
                           Catch::Contains("not completed within 600 ms"));
    if (!own) CHECK_THAT(result, Catch::Contains("aborted the Gloo communicator"));
    // In the ring rank 0 receives from rank 2; rank 1 receives from rank 0 and sends to rank 2. A
    // timeout names whom it waited for.
    if (own && rank == 0) CHECK_THAT(result, Catch::Contains("waiting for rank 2"));
    if (own && rank == 1)
      CHECK_THAT(result, Catch::Contains("waiting to send to rank 2") || Catch::Contains("waiting for rank 0"));
    const long took = std::stol(result.substr(result.rfind("took ") + 5));
    CHECK(took >= 600);
    CHECK(took <= 660 + 250);  // the timeout plus 10%, and a margin for a loaded machine (tests/dist hold the 10%)
  }
  INFO(results[2]);
  CHECK_THAT(results[2], Catch::StartsWith("aborted") && Catch::Contains("aborted the Gloo communicator") &&
                             Catch::Contains("not completed within 600 ms"));
}

TEST_CASE("a Gloo rank that aborts fails its peers' calls at once with its reason", "[comm][gloo]") {
  const std::vector<std::string> results = run_gloo_ranks(2, 20s, [](Communicator& comm) -> std::string {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(200ms);
      comm.abort("its forward threw: NaN in layer 3");
      return "aborted";
    }
    const auto start = std::chrono::steady_clock::now();
    std::string result = outcome([&] { comm.barrier().wait(); });
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return result + " | took " + std::to_string(took.count()) + " ms";
  });
  INFO(results[0]);
  CHECK_THAT(results[0], Catch::StartsWith("aborted") && Catch::Contains("rank 1: its forward threw: NaN in layer 3") &&
                             Catch::Contains("Gloo barrier #1"));
  CHECK(std::stol(results[0].substr(results[0].rfind("took ") + 5)) < 5000);
}

TEST_CASE("a Gloo rank still hears a peer's abort after another peer's connection closed", "[comm][gloo]") {
  // Rank 2 leaves at once (its connections close); rank 1 then aborts; rank 0, waiting on rank 1
  // alone, must fail at once with rank 1's reason: a closed connection to one peer must not stop
  // the notices from the others.
  const std::vector<std::string> results = run_gloo_ranks(3, 20s, [](Communicator& comm) -> std::string {
    if (comm.rank() == 2) return "left";
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(500ms);
      comm.abort("its loss was NaN");
      return "aborted";
    }
    Tensor t = Tensor::full({4}, DType::f32, 0.0);
    const auto start = std::chrono::steady_clock::now();
    std::string result = outcome([&] { comm.recv(t, 1).wait(); });
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return result + " | took " + std::to_string(took.count()) + " ms";
  });
  INFO(results[0]);
  CHECK_THAT(results[0], Catch::StartsWith("aborted") && Catch::Contains("rank 1: its loss was NaN"));
  CHECK(std::stol(results[0].substr(results[0].rfind("took ") + 5)) < 5000);
}

namespace {
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}
}  // namespace

TEST_CASE("a Gloo call aborted with its data in flight leaves the connections quiet", "[comm][gloo]") {
  // Rank 0 aborts while 128 MiB each way are in flight (5 ms into a transfer that takes tens of
  // milliseconds even on a fast machine). The transfers go on into memory the link keeps; had the
  // buffers been freed, Gloo's reader would spin on the data it cannot place.
  std::mutex mutex;
  double idle_cpu = -1;
  const std::vector<std::string> results = run_gloo_ranks(2, 20s, [&](Communicator& comm) -> std::string {
    Tensor t = Tensor::full({32 << 20}, DType::f32, 1.0);
    comm.barrier().wait();
    std::thread aborter;
    if (comm.rank() == 0)
      aborter = std::thread([&] {
        std::this_thread::sleep_for(5ms);
        comm.abort("stopped mid-transfer");
      });
    std::string result = outcome([&] { comm.all_reduce(t, t, ReduceOp::sum).wait(); });
    if (aborter.joinable()) aborter.join();
    std::this_thread::sleep_for(1000ms);  // both ranks' transfers finish or stop meanwhile
    if (comm.rank() == 0) {
      const double before = process_cpu_seconds();
      std::this_thread::sleep_for(1000ms);
      const std::lock_guard lock(mutex);
      idle_cpu = process_cpu_seconds() - before;
    } else {
      std::this_thread::sleep_for(1000ms);
    }
    return result;
  });
  INFO(results[0] << " / " << results[1]);
  CHECK_THAT(results[0], Catch::Contains("stopped mid-transfer"));
  CHECK_THAT(results[1], Catch::Contains("stopped mid-transfer"));
  INFO("CPU time of the idle second: " << idle_cpu << " s");
  CHECK(idle_cpu >= 0);
  CHECK(idle_cpu < 0.2);
}
