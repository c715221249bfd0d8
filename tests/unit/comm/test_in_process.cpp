// The in-process backend: every collective x dtype x op x size (0, 1, odd, not divisible by the
// rank count) x 1..5 ranks, out of place and in place, on crafted inputs whose results are exact
// in every dtype; asynchrony; a peer that never arrives (timeout, then an aborted communicator);
// bad arguments. Catch2's assertions are not thread-safe, so rank threads only record failures
// (first_failure) and the test thread asserts on them.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/numeric.hpp"
#include "support/tensor_checks.hpp"

using loom::DType;
using loom::ErrorCategory;
using loom::Tensor;
using loom::comm::Communicator;
using loom::comm::ReduceOp;
using loom::test::IsError;

namespace {

// Small integers (exact in every dtype) as the dtype.
Tensor filled(DType dtype, std::int64_t n, const std::function<double(std::int64_t)>& value) {
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = value(i);
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::f16: t.data<loom::half>()[i] = loom::to_half(static_cast<float>(v)); break;
      case DType::bf16: t.data<loom::bfloat16>()[i] = loom::to_bfloat16(static_cast<float>(v)); break;
      case DType::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
      default: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v); break;
    }
  }
  return t;
}

double at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::f16: return loom::to_float(t.data<loom::half>()[i]);
    case DType::bf16: return loom::to_float(t.data<loom::bfloat16>()[i]);
    case DType::i32: return t.data<std::int32_t>()[i];
    default: return static_cast<double>(t.data<std::int64_t>()[i]);
  }
}

// Rank r's element i: (r + 1) * (i % 5 + 1).
double contribution(int rank, std::int64_t i) { return (rank + 1) * static_cast<double>(i % 5 + 1); }

double expected(ReduceOp op, int size, std::int64_t i) {
  const double base = static_cast<double>(i % 5 + 1);
  switch (op) {
    case ReduceOp::sum: return base * size * (size + 1) / 2;
    case ReduceOp::avg: return base * (size + 1) / 2.0;
    case ReduceOp::max: return base * size;
    case ReduceOp::min: return base;
  }
  return 0;
}

// One failure description per rank (empty: none), filled by rank threads.
struct RankFailures {
  explicit RankFailures(int size) : first(static_cast<std::size_t>(size)) {}
  void expect(int rank, bool ok, const std::function<std::string()>& describe) {
    std::string& slot = first[static_cast<std::size_t>(rank)];
    if (!ok && slot.empty()) slot = describe();
  }
  void require_none() const {
    for (std::size_t r = 0; r < first.size(); ++r) {
      INFO("rank " << r << ": " << first[r]);
      REQUIRE(first[r].empty());
    }
  }
  std::vector<std::string> first;
};

template <class... Parts>
std::function<std::string()> say(const Parts&... parts) {
  return [=] { return loom::detail::concat(parts...); };
}

}  // namespace

TEST_CASE("in-process collectives give exact results for every dtype, op, size and rank count", "[comm]") {
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
  for (int size = 1; size <= 5; ++size) {
    RankFailures failures(size);
    loom::comm::run_in_process(size, [&](Communicator& comm) {
      const int r = comm.rank();
      auto check = [&](const Tensor& t, std::int64_t i, double want, const char* what, DType dtype, std::int64_t n) {
        failures.expect(r, at(t, i) == want, say(what, " ", dtype, " n=", n, " element ", i, ": ", at(t, i), " != ", want));
      };
      for (DType dtype : dtypes) {
        for (std::int64_t n : {0, 1, 7, 1003}) {
          for (ReduceOp op : ops) {
            if (op == ReduceOp::avg && !loom::is_floating_point(dtype)) continue;
            const Tensor in = filled(dtype, n, [&](std::int64_t i) { return contribution(r, i); });
            const Tensor out = Tensor::full({n}, dtype, -1);
            comm.all_reduce(in, out, op).wait();
            for (std::int64_t i = 0; i < n; ++i) check(out, i, expected(op, size, i), "all_reduce", dtype, n);
            comm.all_reduce(in, in, op).wait();  // in place
            for (std::int64_t i = 0; i < n; ++i) check(in, i, expected(op, size, i), "all_reduce in place", dtype, n);
            // reduce_scatter: size blocks of n elements; this rank gets block r.
            const Tensor blocks = filled(dtype, n * size, [&](std::int64_t i) { return contribution(r, i); });
            const Tensor mine = Tensor::full({n}, dtype, -1);
            comm.reduce_scatter(blocks, mine, op).wait();
            for (std::int64_t i = 0; i < n; ++i) check(mine, i, expected(op, size, r * n + i), "reduce_scatter", dtype, n);
          }
          for (int root = 0; root < size; ++root) {
            const Tensor t = filled(dtype, n, [&](std::int64_t i) { return contribution(r, i); });
            comm.broadcast(t, root).wait();
            for (std::int64_t i = 0; i < n; ++i) check(t, i, contribution(root, i), "broadcast", dtype, n);
          }
          const Tensor gathered = Tensor::full({n * size}, dtype, -1);
          comm.all_gather(filled(dtype, n, [&](std::int64_t i) { return contribution(r, i); }), gathered).wait();
          for (int q = 0; q < size; ++q) {
            for (std::int64_t i = 0; i < n; ++i) check(gathered, q * n + i, contribution(q, i), "all_gather", dtype, n);
          }
        }
      }
      comm.barrier().wait();
    });
    INFO("ranks: " << size);
    failures.require_none();
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
  first.wait();
  second.wait();
  REQUIRE(a.to_vector<float>() == std::vector<float>{3, 3, 3});
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
    auto message = [](const loom::comm::Work& work) -> std::string {
      try {
        work.wait();
      } catch (const loom::Error& e) {
        return std::string(e.category() == ErrorCategory::timeout ? "timeout: " : "other: ") + e.what();
      }
      return "no error";
    };
    first[static_cast<std::size_t>(comm.rank())] = message(comm.all_reduce(t, t, ReduceOp::sum));
    second[static_cast<std::size_t>(comm.rank())] = message(comm.barrier());
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
