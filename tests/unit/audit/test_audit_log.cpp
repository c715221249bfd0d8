// The audit log's writer (audit/audit_log.hpp): a second run appends and continues the chain; a
// log that does not verify, or is keyed otherwise, is refused and left byte for byte as it was;
// reserved field names are refused; the file is owner-only; with 3 in-process ranks, only rank 0
// writes and the others' records arrive at exchange() in rank order with their ranks.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loom/audit/audit_chain.hpp"
#include "loom/audit/audit_log.hpp"
#include "loom/comm/in_process.hpp"
#include "loom/crypt/key.hpp"
#include "support/tensor_checks.hpp"

namespace fs = std::filesystem;
using loom::ErrorCategory;
using loom::test::IsError;

namespace {

fs::path fresh(const std::string& name) {
  const fs::path path = fs::temp_directory_path() / ("loom_test_audit_log_" + name + ".jsonl");
  fs::remove(path);
  return path;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<nlohmann::json> records(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("a second run appends to an audit log and continues its chain", "[audit]") {
  const fs::path path = fresh("append");
  for (int run = 0; run < 2; ++run) {
    loom::audit::AuditLog log(path.string(), nullptr, nullptr);
    log.record("run_start", {{"keyed", false}, {"run", run}});
    log.record("run_end", {{"exit_code", 0}});
  }
  const auto r = loom::audit::verify_audit_file(path.string(), nullptr);
  CHECK(r.ok());
  CHECK(r.records == 4);
  CHECK(r.runs == 2);
  const auto all = records(path);
  CHECK(all[2]["seq"] == 2);
  CHECK(all[2]["prev"] == all[1]["hash"]);
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
}

TEST_CASE("an audit log that does not verify, or is keyed otherwise, is refused and left as it was", "[audit]") {
  const fs::path path = fresh("refuse");
  {
    loom::audit::AuditLog log(path.string(), nullptr, nullptr);
    log.record("run_start", {{"keyed", false}});
    log.record("run_end", {{"exit_code", 0}});
  }
  const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
  const std::string before = read(path);
  REQUIRE_THROWS_MATCHES(loom::audit::AuditLog(path.string(), nullptr, key), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"is not keyed", "has key"}));
  CHECK(read(path) == before);
  std::string damaged = before;
  damaged[damaged.find("run_end")] = 'R';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
  REQUIRE_THROWS_MATCHES(loom::audit::AuditLog(path.string(), nullptr, nullptr), loom::Error,
                         IsError(ErrorCategory::corrupt_data, {"does not verify", "edited: line 2 (seq 1)"}));
  CHECK(read(path) == damaged);

  loom::audit::AuditLog fine(fresh("fields").string(), nullptr, nullptr);
  for (const char* reserved : {"seq", "time", "rank", "event", "prev", "hash"}) {
    REQUIRE_THROWS_MATCHES(fine.record("x", {{reserved, 1}}), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {reserved, "reserved"}));
  }
  REQUIRE_THROWS_MATCHES(fine.record("x", nlohmann::json::array()), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"JSON object"}));
  loom::audit::AuditLog disabled;  // every call does nothing
  disabled.record("run_start");
  disabled.exchange();
  CHECK_FALSE(disabled.enabled());
}

TEST_CASE("with three ranks only rank 0 writes, and the others' records arrive at exchange in rank order", "[audit]") {
  const fs::path path = fresh("ranks");
  std::vector<std::string> errors(3);
  loom::comm::run_in_process(3, [&](loom::comm::Communicator& comm) {
    try {
      loom::audit::AuditLog log(path.string(), &comm, nullptr);
      if (comm.rank() == 0) log.record("run_start", {{"keyed", false}});
      log.record("data_open", {{"path", "shard_" + std::to_string(comm.rank())}});
      log.exchange();
      log.record("run_end", {{"steps", 5}});
      log.exchange();
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  CHECK(errors == std::vector<std::string>(3));
  const auto all = records(path);
  std::vector<std::pair<int, std::string>> seen;
  for (const auto& r : all) seen.emplace_back(r["rank"].get<int>(), r["event"].get<std::string>());
  const std::vector<std::pair<int, std::string>> expected = {
      {0, "run_start"}, {0, "data_open"}, {1, "data_open"}, {2, "data_open"}, {0, "run_end"}, {1, "run_end"}, {2, "run_end"}};
  CHECK(seen == expected);
  CHECK(all[3]["path"] == "shard_2");
  // Rank 0's run_end is not the last record, so the note stays quiet only when a run_end is last.
  CHECK(loom::audit::verify_audit_file(path.string(), nullptr).ok());
}
