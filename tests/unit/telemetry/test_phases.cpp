// PhaseTimer on the CPU, where an event records the host clock: intervals measured against sleeps
// of known length, repeated intervals of a phase adding up, host seconds added in, and the misuse
// errors (a phase begun twice, ended without beginning, read while open).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "loom/telemetry/phases.hpp"
#include "support/tensor_checks.hpp"

using loom::telemetry::Phase;
using loom::telemetry::PhaseTimer;

namespace {
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
}  // namespace

TEST_CASE("PhaseTimer measures each phase's intervals and adds them up", "[telemetry]") {
  PhaseTimer timer(loom::Device::cpu());
  for (int step = 0; step < 2; ++step) {  // the second step reuses the first one's events
    timer.start_step();
    for (int micro = 0; micro < 2; ++micro) {
      {
        const loom::telemetry::PhaseScope phase(timer, Phase::forward, {});
        sleep_ms(20);
      }
      timer.begin(Phase::backward, {});
      sleep_ms(40);
      timer.end(Phase::backward, {});
    }
    timer.add_host_seconds(Phase::data, 0.25);
    timer.add_host_seconds(Phase::data, 0.5);
    const loom::telemetry::PhaseSeconds s = timer.read();
    // A sleep lasts at least as long as asked; the upper bounds only catch a wrong unit or sum.
    CHECK(s[Phase::forward] >= 0.040);
    CHECK(s[Phase::forward] < 0.040 + 0.5);
    CHECK(s[Phase::backward] >= 0.080);
    CHECK(s[Phase::backward] < 0.080 + 0.5);
    CHECK(s[Phase::data] == 0.75);
    CHECK(s[Phase::optimizer] == 0);
    CHECK(s[Phase::communication] == 0);
    CHECK(s[Phase::checkpoint] == 0);
    CHECK(s.total() == Approx(s[Phase::forward] + s[Phase::backward] + 0.75));
  }
}

TEST_CASE("PhaseTimer names the phase it is misused with", "[telemetry]") {
  PhaseTimer timer(loom::Device::cpu());
  timer.start_step();
  CHECK_THROWS_MATCHES(timer.end(Phase::optimizer, {}), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"optimizer", "without having begun"}));
  timer.begin(Phase::forward, {});
  CHECK_THROWS_MATCHES(timer.begin(Phase::forward, {}), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"forward", "previous interval is open"}));
  CHECK_THROWS_MATCHES(timer.read(), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::invalid_argument, {"forward", "read while open"}));
  timer.start_step();  // a failed step's open interval is forgotten
  CHECK(timer.read().total() == 0);
}

TEST_CASE("phase names are the ones metrics and traces use", "[telemetry]") {
  std::string names;
  for (Phase p : loom::telemetry::all_phases) names += std::string(loom::telemetry::phase_name(p)) + " ";
  CHECK(names == "data forward backward communication optimizer checkpoint ");
}
