// The metrics formats on crafted steps: the JSON line read back by nlohmann-json field by field
// (NaN as null), the Prometheus text's exact samples (its parse by the reference parser, Python's
// prometheus_client, is in tests/examples/train_gpt_telemetry.sh), the metrics file appended and
// flushed line by line, the atomic replacement, and an unwritable path named.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "loom/io/files.hpp"
#include "loom/telemetry/metrics.hpp"
#include "support/tensor_checks.hpp"

using loom::telemetry::Phase;
using loom::telemetry::StepMetrics;

namespace {

StepMetrics crafted() {
  StepMetrics m;
  m.step = 42;
  m.rank = 3;
  m.loss = 2.5;
  m.lr = 3e-4;
  m.grad_norm = 0.75;
  m.skipped_total = 2;
  m.loss_scale = 65536;
  m.seconds = 0.125;
  m.tokens_per_second = 8192;
  m.mfu = 0.375;
  m.phases[Phase::data] = 0.001;
  m.phases[Phase::forward] = 0.03125;
  m.phases[Phase::backward] = 0.0625;
  m.phases[Phase::communication] = 0.015625;
  m.phases[Phase::optimizer] = 0.0078125;
  loom::CategoryBytes live{}, peak{};
  live[static_cast<std::size_t>(loom::MemoryCategory::parameters)] = 1000;
  peak[static_cast<std::size_t>(loom::MemoryCategory::activations)] = 123456789;
  m.memory_live = live;
  m.memory_peak = peak;
  m.memory_peak_total = 123457789;
  return m;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a step's JSON line holds every field with its value", "[telemetry]") {
  const nlohmann::json j = nlohmann::json::parse(loom::telemetry::json_line(crafted()));
  CHECK(j["step"] == 42);
  CHECK(j["rank"] == 3);
  CHECK(j["loss"] == 2.5);
  CHECK(j["lr"] == 3e-4);
  CHECK(j["grad_norm"] == 0.75);
  CHECK(j["skipped"] == false);
  CHECK(j["skipped_total"] == 2);
  CHECK(j["loss_scale"] == 65536);
  CHECK(j["step_seconds"] == 0.125);
  CHECK(j["tokens_per_second"] == 8192);
  CHECK(j["mfu"] == 0.375);
  CHECK(j["phase_seconds"]["backward"] == 0.0625);
  CHECK(j["phase_seconds"]["checkpoint"] == 0);
  CHECK(j["phase_seconds"].size() == loom::telemetry::phase_count);
  CHECK(j["memory_live_bytes"]["parameters"] == 1000);
  CHECK(j["memory_peak_bytes"]["activations"] == 123456789);
  CHECK(j["memory_peak_total_bytes"] == 123457789);

  StepMetrics skipped = crafted();
  skipped.grad_norm = std::nan("");
  skipped.mfu.reset();
  skipped.memory_live.reset();
  skipped.memory_peak.reset();
  const nlohmann::json k = nlohmann::json::parse(loom::telemetry::json_line(skipped));
  CHECK(k["grad_norm"].is_null());
  CHECK(k["mfu"].is_null());
  CHECK_FALSE(k.contains("memory_live_bytes"));
  CHECK_FALSE(k.contains("memory_peak_bytes"));
}

TEST_CASE("a step's Prometheus text has one sample per rank, phase and category", "[telemetry]") {
  const std::string text = loom::telemetry::prometheus_text(crafted());
  CHECK_THAT(text, Catch::Contains("# TYPE loom_step_seconds gauge\nloom_step_seconds{rank=\"3\"} 0.125\n"));
  CHECK_THAT(text, Catch::Contains("loom_phase_seconds{rank=\"3\",phase=\"backward\"} 0.0625\n"));
  CHECK_THAT(text, Catch::Contains("loom_phase_seconds{rank=\"3\",phase=\"checkpoint\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE loom_skipped_steps_total counter\nloom_skipped_steps_total{rank=\"3\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("loom_memory_peak_bytes{rank=\"3\",category=\"activations\"} 123456789\n"));
  CHECK_THAT(text, Catch::Contains("loom_mfu_ratio{rank=\"3\"} 0.375\n"));
  // Every sample line is NAME{LABELS} VALUE, and every family is declared before its samples.
  std::istringstream lines(text);
  std::string line, declared;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) declared = line.substr(7, line.find(' ', 7) - 7);
    if (line[0] == '#') continue;
    ++samples;
    INFO(line);
    CHECK(line.rfind(declared + "{rank=\"3\"", 0) == 0);
  }
  CHECK(samples == 9 + 6 + 2 * 7);  // the scalars, the phases, two memory families
  StepMetrics bad = crafted();
  bad.grad_norm = std::nan("");
  CHECK_THAT(loom::telemetry::prometheus_text(bad), Catch::Contains("loom_grad_norm{rank=\"3\"} NaN\n"));
}

TEST_CASE("the metrics file gets one line per step at once, and the Prometheus file is replaced whole",
          "[telemetry]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "loom_test_metrics";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string lines = (dir / "metrics.jsonl").string(), prom = (dir / "loom.prom").string();
  {
    loom::telemetry::MetricsFile file(lines);
    StepMetrics m = crafted();
    file.write(m);
    CHECK(read(lines) == loom::telemetry::json_line(m) + "\n");  // flushed, not buffered
    m.step = 43;
    file.write(m);
    CHECK(read(lines) == loom::telemetry::json_line(crafted()) + "\n" + loom::telemetry::json_line(m) + "\n");
  }
  loom::telemetry::write_prometheus_file(prom, crafted());
  CHECK(read(prom) == loom::telemetry::prometheus_text(crafted()));
  StepMetrics next = crafted();
  next.step = 43;
  loom::telemetry::write_prometheus_file(prom, next);
  CHECK(read(prom) == loom::telemetry::prometheus_text(next));
  // Both owner-only, whatever the umask.
  const auto mode = [](const std::string& path) {
    return std::filesystem::status(path).permissions() & std::filesystem::perms::mask;
  };
  CHECK(mode(lines) == (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(mode(prom) == (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  int files = 0;  // no temporary file left beside it
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 2);
  CHECK_THROWS_MATCHES(loom::telemetry::MetricsFile((dir / "missing" / "m.jsonl").string()), loom::Error,
                       loom::test::IsError(loom::ErrorCategory::io, {"metrics file", "missing/m.jsonl"}));
  std::filesystem::remove_all(dir);
}
