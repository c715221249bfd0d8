// The wrong-path check on crafted step totals: a collective far below the cost model's bandwidth
// is named once, after the warm-up and a full window; one near it, host-timed calls, steps without
// a prediction and the warm-up's slow steps are not. predict() is checked against the planner's
// own prediction for the same calls.
#include <catch2/catch.hpp>

#include <string>

#include "loom/telemetry/path_check.hpp"
#include "loom/comm/in_process.hpp"
#include "loom/plan/plan.hpp"

using loom::telemetry::CollectiveKind;
using loom::telemetry::CommTotals;
using loom::telemetry::PathCheck;

namespace {

// One step's totals: `calls` all-reduces of 16 MiB on 8 ranks, `seconds` achieved, `predicted` by the model.
CommTotals step(int calls, double seconds, double predicted, bool device_timed = true) {
  CommTotals t;
  t.ranks = 8;
  auto& ar = t[CollectiveKind::all_reduce];
  ar.calls = ar.measured_calls = calls;
  ar.device_timed_calls = device_timed ? calls : 0;
  ar.bytes = static_cast<std::int64_t>(calls) * (16 << 20);
  ar.seconds = seconds;
  ar.predicted_seconds = predicted;
  return t;
}

}  // namespace

TEST_CASE("a collective far below the model's bandwidth is named once, after warm-up and a window",
          "[telemetry]") {
  PathCheck check({/*warmup_steps=*/2, /*window_steps=*/3, /*threshold=*/0.5});
  CHECK(check.add(step(2, 0.010, 0.009)).empty());  // warm-up: never judged, whatever it reads
  CHECK(check.add(step(2, 0.500, 0.009)).empty());
  CHECK(check.add(step(2, 0.040, 0.010)).empty());  // the window: 0.04 + 0.03 + 0.05 s against 0.03 s
  CHECK(check.add(step(2, 0.030, 0.010)).empty());
  const auto findings = check.add(step(2, 0.050, 0.010));
  REQUIRE(findings.size() == 1);
  const auto& f = findings[0];
  CHECK(f.kind == CollectiveKind::all_reduce);
  CHECK(f.calls == 6);
  CHECK(f.bytes == 6 * (16 << 20));
  // Bus bandwidth: bytes x 2 (n - 1) / n over the seconds, n = 8.
  CHECK(f.achieved_bus_bytes_per_second == Approx(6.0 * (16 << 20) * 1.75 / 0.120));
  CHECK(f.predicted_bus_bytes_per_second == Approx(6.0 * (16 << 20) * 1.75 / 0.030));
  CHECK(f.ratio() == Approx(0.25));
  const std::string line = loom::telemetry::describe(f);
  CHECK_THAT(line, Catch::StartsWith("all_reduce achieved") && Catch::Contains("over 6 calls of 16.0 MiB on 8 ranks") &&
                       Catch::Contains("0.25 of the") && Catch::Contains("a likely wrong path"));
  for (int i = 0; i < 6; ++i) CHECK(check.add(step(2, 0.100, 0.010)).empty());  // said once per kind
}

TEST_CASE("the path check stays quiet near the model, on host times and without a full prediction",
          "[telemetry]") {
  SECTION("at 0.6 of the prediction") {
    PathCheck check({0, 2, 0.5});
    CHECK(check.add(step(1, 0.010, 0.006)).empty());
    CHECK(check.add(step(1, 0.010, 0.006)).empty());
  }
  SECTION("host-timed calls (a CPU backend's spans)") {
    PathCheck check({0, 2, 0.5});
    CHECK(check.add(step(1, 0.100, 0.006, false)).empty());
    CHECK(check.add(step(1, 0.100, 0.006, false)).empty());
  }
  SECTION("a step of the window without a prediction") {
    PathCheck check({0, 2, 0.5});
    CommTotals unpredicted = step(1, 0.100, 0);
    unpredicted[CollectiveKind::all_reduce].predicted_seconds.reset();
    CHECK(check.add(unpredicted).empty());
    CHECK(check.add(step(1, 0.100, 0.006)).empty());
    // The next window is whole again, and judged.
    CHECK(check.add(step(1, 0.100, 0.006)).empty());
    CHECK(check.add(step(1, 0.100, 0.006)).size() == 1);
  }
  SECTION("one rank: nothing moves") {
    PathCheck check({0, 1, 0.5});
    CommTotals one = step(1, 0.100, 0.006);
    one.ranks = 1;
    CHECK(check.add(one).empty());
  }
}

TEST_CASE("the path check refuses options that cannot judge", "[telemetry]") {
  CHECK_THROWS_WITH(PathCheck({0, 0, 0.5}), Catch::Contains("window_steps > 0"));
  CHECK_THROWS_WITH(PathCheck({0, 5, 0}), Catch::Contains("threshold > 0"));
}

TEST_CASE("predict() asks the planner about a call of the step's mean size", "[telemetry]") {
  const loom::topo::Topology topology = loom::plan::hgx_cluster("H100", 8);
  const loom::topo::Planner planner(topology);
  CommTotals t;
  t.ranks = 8;
  auto& ar = t[CollectiveKind::all_reduce];
  ar.calls = 4;  // three of 8 MiB and the loss's 4-byte mean (counted, not measured)
  ar.measured_calls = 3;
  ar.bytes = 3 * (8 << 20);
  auto& other = t[CollectiveKind::other];
  other.calls = other.measured_calls = 1;
  other.bytes = 1 << 20;
  loom::telemetry::predict(t, planner);
  REQUIRE(ar.predicted_seconds.has_value());
  CHECK(*ar.predicted_seconds ==
        Approx(3 * planner.choose(loom::topo::Collective::all_reduce, 8 << 20).prediction.seconds));
  CHECK_FALSE(t[CollectiveKind::all_gather].predicted_seconds.has_value());  // no calls
  CHECK_FALSE(other.predicted_seconds.has_value());                          // not modelled
}

TEST_CASE("the ranks judge their fastest rank's time: a late peer's wait is no wrong path", "[telemetry]") {
  // 2 ranks: rank 0 waited for a late rank 1 in every call (0.1 s against the model's 0.006 s);
  // rank 1 arrived last and ran at the model's speed. Neither names a wrong path. When both are
  // slow, both name it, with the faster rank's figure.
  for (const double late : {0.005, 0.05}) {
    std::vector<std::vector<loom::telemetry::PathFinding>> found(2);
    loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
      PathCheck check({0, 2, 0.5}, &comm);
      const double seconds = comm.rank() == 0 ? 0.1 : late;
      for (int s = 0; s < 2; ++s) {
        auto f = check.add(step(1, seconds, 0.006));
        if (!f.empty()) found[static_cast<std::size_t>(comm.rank())] = f;
      }
    });
    INFO("the last rank's window: " << late << " s per step");
    if (late < 0.01) {
      CHECK(found[0].empty());
      CHECK(found[1].empty());
    } else {
      REQUIRE(found[0].size() == 1);
      REQUIRE(found[1].size() == 1);
      CHECK(found[0][0].ratio() == Approx(0.006 / 0.05));  // the faster rank's time judged
      CHECK(found[1][0].ratio() == Approx(found[0][0].ratio()));
    }
  }
}
