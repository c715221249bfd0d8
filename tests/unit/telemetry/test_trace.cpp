// TraceRecorder on the CPU: stream spans against sleeps of known length, their order and nesting,
// host spans from another thread, the file written after the range's last step (read back with
// nlohmann-json) with a track per kind, the collectives of a traced in-process communicator with
// their bytes, and the named errors (an empty range, a directory that cannot be made).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/tensor.hpp"
#include "loom/telemetry/comm_meter.hpp"
#include "loom/telemetry/trace.hpp"

using loom::telemetry::TraceRecorder;
using loom::telemetry::TraceTrack;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<nlohmann::json> spans(const nlohmann::json& trace) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") out.push_back(e);
  }
  return out;
}

}  // namespace

TEST_CASE("a trace holds the range's spans with their times, tracks and steps", "[telemetry]") {
  const auto dir = std::filesystem::temp_directory_path() / "loom_test_trace";
  std::filesystem::remove_all(dir);
  {
    TraceRecorder trace({.dir = dir.string(), .first_step = 2, .last_step = 3}, loom::Device::cpu(), 5);
    for (std::int64_t step = 1; step <= 4; ++step) {
      trace.begin_step(step, {});
      CHECK(trace.recording() == (step == 2 || step == 3));
      if (trace.recording()) {
        const std::size_t outer = trace.begin("backward", "phase", {});
        const std::size_t inner = trace.begin("backward unit 1", "unit", {});
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        trace.end(inner, {});
        trace.end(outer, {});
        std::thread other([&] {
          const auto start = TraceRecorder::Clock::now();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          trace.host_span("all_reduce", "communication", TraceTrack::communication, start, TraceRecorder::Clock::now(), 4096);
        });
        other.join();
      }
      trace.end_step();
      CHECK(std::filesystem::exists(trace.path()) == (step >= 3));  // written after step 3
    }
    CHECK(trace.path() == (dir / "trace_rank5.json").string());
  }
  const nlohmann::json file = read_json((dir / "trace_rank5.json").string());
  CHECK(file["otherData"]["rank"] == 5);
  const auto all = spans(file);
  REQUIRE(all.size() == 6);  // 3 spans in each of steps 2 and 3
  for (std::int64_t step : {2, 3}) {
    INFO("step " << step);
    const nlohmann::json *outer = nullptr, *inner = nullptr, *call = nullptr;
    for (const auto& e : all) {
      if (e["args"]["step"] != step) continue;
      if (e["name"] == "backward") outer = &e;
      if (e["name"] == "backward unit 1") inner = &e;
      if (e["name"] == "all_reduce") call = &e;
    }
    REQUIRE(outer != nullptr);
    REQUIRE(inner != nullptr);
    REQUIRE(call != nullptr);
    CHECK((*outer)["tid"] == static_cast<int>(TraceTrack::compute));
    CHECK((*call)["tid"] == static_cast<int>(TraceTrack::communication));
    CHECK((*call)["args"]["bytes"] == 4096);
    CHECK((*inner)["dur"].get<double>() >= 20000);  // microseconds; a sleep lasts at least as asked
    CHECK((*call)["dur"].get<double>() >= 10000);
    // Nesting: the unit inside its pass; the call after both (it started after they ended; the
    // stream spans are placed through an anchor read around the step's reference, within 1 ms).
    CHECK((*outer)["ts"].get<double>() <= (*inner)["ts"].get<double>());
    CHECK((*inner)["ts"].get<double>() + (*inner)["dur"].get<double>() <=
          (*outer)["ts"].get<double>() + (*outer)["dur"].get<double>() + 1);
    CHECK((*call)["ts"].get<double>() >= (*outer)["ts"].get<double>() + (*outer)["dur"].get<double>() - 1000);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a traced communicator records each collective with its bytes, from call to completion",
          "[telemetry]") {
  const auto dir = std::filesystem::temp_directory_path() / "loom_test_trace_comm";
  std::filesystem::remove_all(dir);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    const auto trace = std::make_shared<TraceRecorder>(loom::telemetry::TraceOptions{.dir = dir.string(), .first_step = 1,
                                                                                      .last_step = 1},
                                                       loom::Device::cpu(), comm.rank());
    const auto traced = loom::telemetry::observed_communicator(comm, trace, nullptr);
    const loom::Tensor t = loom::Tensor::full({1000}, loom::DType::f32, 1.0);
    traced->all_reduce(t, t, loom::comm::ReduceOp::sum).wait();  // before the range: not recorded
    trace->begin_step(1, {});
    traced->all_reduce(t, t, loom::comm::ReduceOp::sum).wait();
    const loom::Tensor gathered = loom::Tensor::empty({2000}, loom::DType::f32);
    traced->all_gather(t, gathered).wait();
    trace->end_step();
    if (t.to_vector<float>()[0] != 4.0f) throw std::runtime_error("the traced all-reduce did not reduce");
  });
  for (int rank = 0; rank < 2; ++rank) {
    const auto all = spans(read_json((dir / ("trace_rank" + std::to_string(rank) + ".json")).string()));
    REQUIRE(all.size() == 2);
    CHECK(all[0]["name"] == "all_reduce");
    CHECK(all[0]["args"]["bytes"] == 4000);
    CHECK(all[1]["name"] == "all_gather");
    CHECK(all[1]["args"]["bytes"] == 8000);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a trace refuses an empty step range and a directory it cannot make, by name", "[telemetry]") {
  CHECK_THROWS_WITH(TraceRecorder({.dir = "/tmp/x", .first_step = 5, .last_step = 4}, loom::Device::cpu(), 0),
                    Catch::Contains("step range 5-4"));
  CHECK_THROWS_WITH(TraceRecorder({.dir = "/proc/loom_trace", .first_step = 1, .last_step = 2}, loom::Device::cpu(), 0),
                    Catch::Contains("cannot create the directory '/proc/loom_trace'"));
}
