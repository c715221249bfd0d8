// The right-sizing report: run totals averaged step by step, every rank's summary gathered over 3
// in-process ranks, the communication share and the slowest rank on crafted ranks, and the
// markdown and JSON (read back by nlohmann-json) holding them and the alternatives.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "loom/comm/in_process.hpp"
#include "loom/telemetry/report.hpp"

using loom::telemetry::Phase;
using loom::telemetry::RankSummary;

namespace {
RankSummary rank_of(int rank, double step, double communication) {
  RankSummary r;
  r.rank = rank;
  r.step_seconds = step;
  r.phases[Phase::forward] = (step - communication) / 3;
  r.phases[Phase::backward] = 2 * (step - communication) / 3;
  r.phases[Phase::communication] = communication;
  r.memory_peak_bytes = 3LL << 30;
  r.memory_capacity_bytes = 4LL << 30;
  return r;
}
}  // namespace

TEST_CASE("run totals average the steps and keep the memory peak", "[telemetry]") {
  loom::telemetry::RunTotals totals;
  loom::telemetry::PhaseSeconds a, b;
  a[Phase::backward] = 0.25;
  b[Phase::backward] = 0.75;
  totals.add(1.0, a, 100);
  totals.add(2.0, b, 300);
  totals.add(3.0, {}, 200);
  CHECK(totals.steps() == 3);
  CHECK(totals.step_seconds_mean() == 2.0);
  CHECK(totals.phases_mean()[Phase::backward] == Approx(1.0 / 3));
  CHECK(totals.memory_peak_bytes() == 300);
}

TEST_CASE("every rank's summary reaches every rank", "[telemetry]") {
  std::vector<std::vector<RankSummary>> got(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
    RankSummary mine = rank_of(comm.rank(), 0.5 + comm.rank(), 0.125);
    if (comm.rank() == 1) mine.gpu = loom::telemetry::GpuSummary{.samples = 6, .utilization_mean = 60, .utilization_p95 = 90};
    got[static_cast<std::size_t>(comm.rank())] = loom::telemetry::gather_summaries(mine, &comm);
  });
  for (const auto& ranks : got) {
    REQUIRE(ranks.size() == 3);
    for (int r = 0; r < 3; ++r) {
      CHECK(ranks[static_cast<std::size_t>(r)].rank == r);
      CHECK(ranks[static_cast<std::size_t>(r)].step_seconds == 0.5 + r);
      CHECK(ranks[static_cast<std::size_t>(r)].phases[Phase::communication] == 0.125);
      CHECK(ranks[static_cast<std::size_t>(r)].memory_peak_bytes == (3LL << 30));
      CHECK(ranks[static_cast<std::size_t>(r)].gpu.has_value() == (r == 1));
    }
    CHECK(ranks[1].gpu->utilization_p95 == 90);
  }
}

TEST_CASE("the report names the slowest rank, the communication share and the alternatives", "[telemetry]") {
  loom::telemetry::RunReport report;
  report.job = "GPT 2 layers";
  report.device = "cpu";
  report.steps = 40;
  report.tokens_per_second = 1000;
  // Equal steps (the ranks wait for each other); rank 2 computes most and waits least.
  report.ranks = {rank_of(0, 0.1, 0.04), rank_of(1, 0.1, 0.03), rank_of(2, 0.1, 0.005)};
  report.alternatives = {{.gpu = "NVIDIA H100 80GB HBM3", .gpus = 8, .layout = "DP 8, ZeRO-0, none", .fits = true,
                          .step_seconds = 0.05, .tokens_per_second = 2e6, .gpu_hours_per_billion_tokens = 1.1},
                         {.gpu = "NVIDIA A100-SXM4-80GB", .gpus = 1, .layout = "nothing fits"}};
  CHECK(report.slowest_rank() == 2);
  CHECK(report.communication_share() == Approx(0.075 / 0.3));
  const std::string md = loom::telemetry::report_markdown(report);
  CHECK_THAT(md, Catch::Contains("- slowest rank (most compute per step): 2"));
  CHECK_THAT(md, Catch::Contains("- communication share of the step (exposed): 25.0%"));
  CHECK_THAT(md, Catch::Contains("| 2 | 100.00 | 0.00 | 31.67 | 63.33 | 5.00 | 0.00 | 0.00 | 3 | 4.0 | 25% | - | - |"));
  CHECK_THAT(md, Catch::Contains("| NVIDIA H100 80GB HBM3 | 8 | DP 8, ZeRO-0, none | 50 | 2000000 | 1.1 |"));
  CHECK_THAT(md, Catch::Contains("| NVIDIA A100-SXM4-80GB | 1 | nothing fits | - | - | - |"));
  const nlohmann::json j = nlohmann::json::parse(loom::telemetry::report_json(report));
  CHECK(j["slowest_rank"] == 2);
  CHECK(j["ranks"].size() == 3);
  CHECK(j["ranks"][2]["phase_seconds"]["communication"] == 0.005);
  CHECK(j["alternatives"][0]["fits"] == true);
  CHECK(j["alternatives"][1]["fits"] == false);
  CHECK(j["mfu"].is_null());
}
