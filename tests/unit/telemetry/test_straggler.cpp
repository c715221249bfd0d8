// Straggler detection: the rules on crafted windows (a slow compute phase named, the waiting ranks'
// communication never, microsecond phases below the step's share ignored, the median of an even
// count), the description, and the exchange over 3 in-process ranks: the named rank and phase, the
// streak over consecutive windows, the counts, and no finding when the ranks agree.
#include <catch2/catch.hpp>

#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/telemetry/straggler.hpp"

using loom::telemetry::Phase;
using loom::telemetry::RankWindow;
using loom::telemetry::StragglerOptions;

namespace {

RankWindow window(int rank, double forward, double backward, double communication, double data = 0.001) {
  RankWindow w;
  w.rank = rank;
  w.phases[Phase::data] = data;
  w.phases[Phase::forward] = forward;
  w.phases[Phase::backward] = backward;
  w.phases[Phase::communication] = communication;
  w.phases[Phase::optimizer] = 0.01;
  w.step_seconds = w.phases.total();
  return w;
}

}  // namespace

TEST_CASE("a compute phase over the median by the margin names its rank, and the waiting ranks do not",
          "[telemetry]") {
  // Rank 2's backward is 38% over the others'; ranks 0 and 1 wait for it in communication.
  const std::vector<RankWindow> ranks = {window(0, 0.05, 0.100, 0.040), window(1, 0.05, 0.100, 0.039),
                                         window(2, 0.05, 0.138, 0.001)};
  const auto found = loom::telemetry::find_stragglers(ranks, StragglerOptions{});
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 2);
  CHECK(found[0].phase == Phase::backward);
  CHECK(found[0].seconds == 0.138);
  CHECK(found[0].median_seconds == 0.100);
  CHECK(found[0].excess() == Approx(0.38));
  // Under the margin: nothing.
  CHECK(loom::telemetry::find_stragglers(ranks, {.every = 50, .margin = 0.4}).empty());
  // A data wait of 5 ms against 1 ms is +400%, but under 5% of a 0.2 s step: not named; at 15 ms it is.
  std::vector<RankWindow> data = {window(0, 0.05, 0.1, 0.04), window(1, 0.05, 0.1, 0.04), window(2, 0.05, 0.1, 0.04, 0.005)};
  CHECK(loom::telemetry::find_stragglers(data, StragglerOptions{}).empty());
  data[2] = window(2, 0.05, 0.1, 0.04, 0.015);
  const auto slow_data = loom::telemetry::find_stragglers(data, StragglerOptions{});
  REQUIRE(slow_data.size() == 1);
  CHECK(slow_data[0].phase == Phase::data);
  // Two ranks: the median is their mean, so the slow one is half its excess over it.
  const auto two = loom::telemetry::find_stragglers({window(0, 0.05, 0.1, 0.06), window(1, 0.05, 0.2, 0.0)}, {});
  REQUIRE(two.size() == 1);
  CHECK(two[0].rank == 1);
  CHECK(two[0].median_seconds == Approx(0.15));
  CHECK(loom::telemetry::find_stragglers({window(0, 0.05, 0.1, 0.06)}, {}).empty());  // one rank: no peers
}

TEST_CASE("a straggler is described with its rank, phase, excess and streak", "[telemetry]") {
  loom::telemetry::StragglerFinding f{.rank = 3, .phase = Phase::backward, .seconds = 0.412, .median_seconds = 0.298,
                                      .steps = 200};
  CHECK(loom::telemetry::describe(f) == "rank 3 backward +38% over the median for 200 steps (0.4120 s against 0.2980 s)");
}

TEST_CASE("the ranks exchange their windows every N steps and agree on the straggler", "[telemetry]") {
  std::vector<std::vector<loom::telemetry::StragglerWindow>> windows(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
    loom::telemetry::StragglerDetector detector({.every = 4}, &comm);
    const int r = comm.rank();
    for (std::int64_t step = 1; step <= 12; ++step) {
      // Rank 1's forward is slow in steps 1-8 (the first two windows), then it recovers.
      const RankWindow w = window(r, r == 1 && step <= 8 ? 0.08 : 0.05, 0.1, r == 1 ? 0.0 : 0.03);
      if (auto out = detector.add(step, w.step_seconds, w.phases)) windows[static_cast<std::size_t>(r)].push_back(*out);
    }
  });
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    REQUIRE(windows[r].size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& w = windows[r][i];
      CHECK(w.last_step == 4 * static_cast<std::int64_t>(i + 1));
      CHECK(w.steps == 4);
      REQUIRE(w.ranks.size() == 3);
      CHECK(w.ranks[1].phases[Phase::forward] == Approx(i < 2 ? 0.08 : 0.05));
      CHECK(w.ranks[2].phases[Phase::communication] == Approx(0.03));
    }
    REQUIRE(windows[r][0].findings.size() == 1);
    CHECK(windows[r][0].findings[0].rank == 1);
    CHECK(windows[r][0].findings[0].phase == Phase::forward);
    CHECK(windows[r][0].findings[0].steps == 4);
    REQUIRE(windows[r][1].findings.size() == 1);
    CHECK(windows[r][1].findings[0].steps == 8);  // the streak: two windows in a row
    CHECK(windows[r][2].findings.empty());        // recovered
    CHECK(windows[r][2].named_windows.at({1, Phase::forward}) == 2);
  }
}

TEST_CASE("straggler options are checked by name", "[telemetry]") {
  CHECK_THROWS_WITH(loom::telemetry::StragglerDetector({.every = -1}, nullptr), Catch::Contains("every -1 steps"));
  CHECK_THROWS_WITH(loom::telemetry::StragglerDetector({.margin = 0}, nullptr), Catch::Contains("margin 0"));
  loom::telemetry::StragglerDetector off({.every = 0}, nullptr);
  CHECK_FALSE(off.add(1, 1.0, {}).has_value());
  loom::telemetry::StragglerDetector alone({.every = 1}, nullptr);  // one process: a window of its own
  const auto w = alone.add(1, 0.5, {});
  REQUIRE(w.has_value());
  CHECK(w->ranks.size() == 1);
  CHECK(w->findings.empty());
}
