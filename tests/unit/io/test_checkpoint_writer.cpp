// io::CheckpointWriter (src/io/checkpoint_writer.cpp), through the Trainer as users call it, on
// 2 in-process ranks:
// - asynchronous saves every 2 steps leave training bit for bit as a run without saves, and each
//   committed checkpoint holds exactly the values of the step it was taken at, although training
//   changed them while the write (slowed by a rate limit) was in flight;
// - a save commits although its write lasts longer than the training communicator's 1 s timeout (the
//   commit waits on the checkpoint communicator, whose deadline is derived from the bytes), and
//   the deadline is slack + this rank's bytes / rate, the longest over the ranks;
// - a rank that cannot write fails the background save on every rank, wait() throws it on each,
//   `latest` still names the previous checkpoint, and the next save works.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/checkpoint_writer.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/train/trainer.hpp"
#include "support/ddp_equivalence.hpp"
#include "support/error_message.hpp"
#include "support/tiny_gpt.hpp"

namespace fs = std::filesystem;
using loom::Tensor;

namespace {

using loom::test::tiny_trainer_options;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_test_writer_" + name);
  fs::remove_all(dir);
  return dir;
}

std::vector<std::vector<float>> values_of(const loom::model::ParameterSpace& space) {
  std::vector<std::vector<float>> out;
  for (const loom::model::Parameter* p : space.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

// The values a checkpoint holds, loaded into a fresh one-process model.
std::vector<std::vector<float>> values_in(const std::string& dir) {
  loom::nn::GPT model(loom::test::tiny_gpt(64, 8), loom::nn::Precision::fp32(), loom::Device::cpu(), 99);
  loom::optim::AdamW optimizer(model.parameter_space(), {});
  loom::io::load_checkpoint(dir, model, optimizer);
  return values_of(model.parameter_space());
}

}  // namespace

TEST_CASE("asynchronous saves leave training bit for bit unchanged and hold their own step's values", "[io][writer]") {
  const fs::path run = fresh_dir("async");
  constexpr int steps = 6;
  std::vector<std::vector<float>> without_saves, with_saves;
  std::map<std::int64_t, std::vector<std::vector<float>>> at_save;  // rank 0's values when each save began
  std::vector<std::vector<loom::io::SaveReport>> reports(2);
  std::vector<std::string> changed_in_flight(2, "no");
  for (const bool saving : {false, true}) {
    loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
      loom::nn::GPT model(loom::test::tiny_gpt(64, 8), loom::nn::Precision::fp32(), loom::Device::cpu(), 3,
                          loom::shard::space_layout(2, &comm));
      loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
      loom::train::TrainerOptions o = tiny_trainer_options(2);
      o.checkpoint.max_write_bytes_per_second = 2e5;  // ~46 kB per rank: a write of ~0.23 s, steps take ms
      loom::train::Trainer trainer(model, data, o, &comm);
      const auto r = static_cast<std::size_t>(comm.rank());
      for (int s = 1; s <= steps; ++s) {
        trainer.step();
        for (loom::io::SaveReport& report : trainer.finished_saves()) reports[r].push_back(std::move(report));
        if (!saving || s % 2 != 0) continue;
        trainer.save_async(run.string());
        if (r == 0) at_save[s] = values_of(model.parameter_space());
        if (s == 2) {
          trainer.step();  // runs while the write is in flight, and changes the values
          ++s;
          std::vector<loom::io::SaveReport> done = trainer.finished_saves();
          if (done.empty() && values_of(model.parameter_space()) != at_save[2]) changed_in_flight[r] = "yes";
          for (loom::io::SaveReport& report : done) reports[r].push_back(std::move(report));
        }
      }
      trainer.wait_for_save();
      for (loom::io::SaveReport& report : trainer.finished_saves()) reports[r].push_back(std::move(report));
      if (r == 0) (saving ? with_saves : without_saves) = values_of(model.parameter_space());
    });
  }
  CHECK(with_saves == without_saves);
  // The step-2 save was still writing while step 3 changed the values, on both ranks.
  CHECK(changed_in_flight == std::vector<std::string>{"yes", "yes"});
  for (const std::vector<loom::io::SaveReport>& rank_reports : reports) {
    REQUIRE(rank_reports.size() == 3);
    for (std::size_t i = 0; i < rank_reports.size(); ++i) {
      const loom::io::SaveReport& report = rank_reports[i];
      CHECK(report.asynchronous);
      CHECK(report.step == 2 * static_cast<std::int64_t>(i + 1));
      CHECK(report.bytes > 0);
      // At 200 kB/s the write takes bytes / 2e5 s at least.
      CHECK(report.write_seconds >= 0.9 * static_cast<double>(report.bytes) / 2e5);
    }
    // The first save blocked for the copy to host memory alone, far quicker than its write (the
    // later ones also waited for the save before them, still writing a step earlier).
    CHECK(rank_reports[0].blocked_seconds < 0.5 * rank_reports[0].write_seconds);
  }
  for (const auto& [step, values] : at_save) {
    INFO("the checkpoint of step " << step);
    char name[32];
    std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
    CHECK(loom::io::verify_checkpoint((run / name).string()) == step);
    CHECK(values_in((run / name).string()) == values);
  }
  CHECK(loom::io::latest_checkpoint(run.string()) == (run / "step_00000006").string());
}

TEST_CASE("a save's commit waits past the training communicator's timeout, up to a deadline from the bytes",
          "[io][writer]") {
  const fs::path run = fresh_dir("deadline");
  loom::comm::CommOptions short_timeout;
  short_timeout.timeout = std::chrono::milliseconds(1000);
  std::vector<std::string> outcome(2);
  std::vector<std::int64_t> deadlines(2), expected(2);
  std::vector<double> seconds(2), bytes_per_save(2), counted(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    loom::nn::GPT model(loom::test::tiny_gpt(64, 8), loom::nn::Precision::fp32(), loom::Device::cpu(), 3,
                        loom::shard::space_layout(1, &comm));
    loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
    loom::train::Trainer trainer(model, data, tiny_trainer_options(1), &comm);
    trainer.step();
    const auto r = static_cast<std::size_t>(comm.rank());
    // Rank 1 writes at 30 kB/s: about 1.5 s for its part, while rank 0 waits in the commit.
    loom::io::CheckpointWriterOptions slow;
    slow.commit_slack = std::chrono::milliseconds(1000);
    slow.min_write_bytes_per_second = 1e6;
    if (comm.rank() == 1) slow.max_write_bytes_per_second = 3e4;
    loom::io::CheckpointWriter writer(model, trainer.optimizer(), &comm, slow);
    deadlines[r] = writer.commit_deadline().count();
    // This rank's part, counted from the tensors: half of every value tensor (replicated under
    // ZeRO-1: each rank writes half) and its own segments of the AdamW state.
    double mine = 0;
    for (const loom::model::Parameter* p : model.parameter_space().parameters()) {
      const std::int64_t n = p->value().numel();
      mine += 4.0 * static_cast<double>(n * (comm.rank() + 1) / 2 - n * comm.rank() / 2);
    }
    for (const loom::optim::Optimizer::Segment& s : trainer.optimizer().segments()) {
      mine += 4.0 * static_cast<double>(s.end - s.begin) * static_cast<double>(trainer.optimizer().state_kinds().size());
    }
    bytes_per_save[r] = static_cast<double>(writer.bytes_per_save());  // checked after the ranks end:
    counted[r] = mine;                                                  // Catch is not thread-safe
    expected[r] = 1000 + static_cast<std::int64_t>(std::ceil(1e3 * mine / (comm.rank() == 1 ? 3e4 : 1e6)));
    const auto start = std::chrono::steady_clock::now();
    outcome[r] = loom::test::error_message([&] { writer.save(run.string(), trainer.progress()); });
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }, short_timeout);
  CHECK(outcome == std::vector<std::string>{"no error", "no error"});
  CHECK(bytes_per_save == counted);
  CHECK(seconds[0] > 1.0);  // rank 0 did wait longer than the training communicator's timeout
  CHECK(deadlines[0] == deadlines[1]);
  CHECK(deadlines[0] == std::max(expected[0], expected[1]));
  CHECK(loom::io::verify_checkpoint((run / "step_00000001").string()) == 1);
}

TEST_CASE("a rank that cannot write fails the background save on every rank, and `latest` keeps the previous one",
          "[io][writer]") {
  const fs::path run = fresh_dir("failure");
  // On rank 1 the run directory is under a regular file: its file system does not show it the
  // folder rank 0 prepared (as on a node without the shared mount).
  const fs::path blocked = fresh_dir("failure_file");
  std::ofstream(blocked.string()) << "not a directory";
  std::vector<std::string> failed(2), recovered(2);
  loom::comm::run_in_process(2, [&](loom::comm::Communicator& comm) {
    loom::nn::GPT model(loom::test::tiny_gpt(64, 8), loom::nn::Precision::fp32(), loom::Device::cpu(), 3,
                        loom::shard::space_layout(2, &comm));
    loom::test::GlobalBatchSlice data(4, 2 * comm.rank(), 2);
    loom::train::Trainer trainer(model, data, tiny_trainer_options(2), &comm);
    const auto r = static_cast<std::size_t>(comm.rank());
    trainer.step();
    trainer.save_async(run.string());
    trainer.wait_for_save();
    trainer.step();
    trainer.save_async(comm.rank() == 1 ? (blocked / "run").string() : run.string());
    trainer.step();  // training goes on; the failure comes out of the next wait
    failed[r] = loom::test::error_message([&] { trainer.wait_for_save(); });
    recovered[r] = loom::test::error_message([&] { trainer.save(run.string()); });
  });
  // Rank 1 throws its own error; rank 0 one that names rank 1 and carries its message.
  CHECK_THAT(failed[1], Catch::StartsWith("loom I/O error: cannot create") && Catch::Contains("rank_00001"));
  CHECK_THAT(failed[0], Catch::Contains("writing a checkpoint") && Catch::Contains("rank 1") &&
                            Catch::Contains("cannot create"));
  CHECK(recovered == std::vector<std::string>{"no error", "no error"});
  CHECK_FALSE(fs::exists(run / "step_00000002"));
  CHECK(fs::exists(run / ".step_00000002.tmp"));  // left for remove_stale_temporaries
  CHECK(loom::io::verify_checkpoint((run / "step_00000001").string()) == 1);
  CHECK(loom::io::latest_checkpoint(run.string()) == (run / "step_00000003").string());
}
