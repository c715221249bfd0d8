// The audit log's writer (audit/audit_log.hpp): a second run appends and continues the chain; a
// log that does not verify, or is keyed otherwise, is refused and left byte for byte as it was;
// reserved field names are refused; the file is owner-only; with 3 in-process ranks, only rank 0
// writes and the others' records arrive at exchange() in rank order with their ranks; the writer
// stamps the log's keying; a symbolic link and a log another writer holds are refused; text that
// is not UTF-8 is replaced, not thrown; a short write (a file-size limit) is cut off again.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "loom/audit/audit_chain.hpp"
#include "loom/audit/audit_log.hpp"
#include "loom/comm/in_process.hpp"
#include "loom/crypt/key.hpp"
#include "support/file_size_limit.hpp"
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

TEST_CASE("a log whose last record lost its newline is continued on a line of its own", "[audit]") {
  const fs::path path = fresh("no_newline");
  {
    loom::audit::AuditLog log(path.string(), nullptr, nullptr);
    log.record("run_start");
    log.record("run_end", {{"exit_code", 0}});
  }
  std::string text = read(path);
  REQUIRE(text.back() == '\n');
  text.pop_back();  // as an editor that strips the final newline saves it
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  REQUIRE(loom::audit::verify_audit_file(path.string(), nullptr).ok());
  {
    loom::audit::AuditLog log(path.string(), nullptr, nullptr);
    log.record("run_start");
  }
  const auto r = loom::audit::verify_audit_file(path.string(), nullptr);
  CHECK(r.ok());
  CHECK(r.records == 3);
  CHECK(records(path).size() == 3);
  CHECK(read(path) == text + "\n" + read(path).substr(text.size() + 1));
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
                         IsError(ErrorCategory::invalid_argument,
                                 {"cannot be continued", "key: line 1 (seq 0)", "not keyed, but a key was given"}));
  CHECK(read(path) == before);
  {
    const fs::path keyed_path = fresh("refuse_keyed");
    loom::audit::AuditLog(keyed_path.string(), nullptr, key).record("run_start");
    const std::string keyed_before = read(keyed_path);
    REQUIRE_THROWS_MATCHES(loom::audit::AuditLog(keyed_path.string(), nullptr, nullptr), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"cannot be continued", key->id_hex()}));
    const auto other = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
    REQUIRE_THROWS_MATCHES(loom::audit::AuditLog(keyed_path.string(), nullptr, other), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"cannot be continued", other->id_hex()}));
    CHECK(read(keyed_path) == keyed_before);
  }
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

TEST_CASE("the audit writer stamps the log's keying into the first record and each run_start", "[audit]") {
  const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
  const fs::path plain = fresh("stamp_plain");
  {
    loom::audit::AuditLog log(plain.string(), nullptr, nullptr);
    log.record("data_open", {{"path", "x"}});  // not a run_start, but the file's first record
    log.record("run_start");
    log.record("note");
  }
  const auto p = records(plain);
  CHECK(p[0]["keyed"] == false);
  CHECK(p[1]["keyed"] == false);
  CHECK_FALSE(p[2].contains("keyed"));
  CHECK_FALSE(p[0].contains("key_id"));
  const fs::path keyed = fresh("stamp_keyed");
  {
    loom::audit::AuditLog log(keyed.string(), nullptr, key);
    log.record("run_start", {{"user", "tester"}});
    REQUIRE_THROWS_MATCHES(log.record("run_start", {{"keyed", false}}), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"'keyed'", "the log is keyed"}));
    REQUIRE_THROWS_MATCHES(log.record("run_start", {{"key_id", "00"}}), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"'key_id'", key->id_hex()}));
    log.record("run_start", {{"keyed", true}, {"key_id", key->id_hex()}});  // the truth is accepted
  }
  const auto k = records(keyed);
  REQUIRE(k.size() == 2);
  CHECK(k[0]["keyed"] == true);
  CHECK(k[0]["key_id"] == key->id_hex());
  CHECK(k[0]["user"] == "tester");
  const auto r = loom::audit::verify_audit_file(keyed.string(), key.get());
  CHECK(r.ok());
  CHECK(r.keyed);
  CHECK(r.runs == 2);
}

TEST_CASE("an audit log at a symbolic link, or held by another writer, is refused", "[audit]") {
  const fs::path target = fresh("link_target");
  std::ofstream(target) << "not a log\n";
  const fs::path link = fresh("link");
  fs::create_symlink(target, link);
  REQUIRE_THROWS_MATCHES(loom::audit::AuditLog(link.string(), nullptr, nullptr), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"symbolic link"}));
  CHECK(read(target) == "not a log\n");
  fs::remove(link);

  const fs::path path = fresh("locked");
  {
    loom::audit::AuditLog first(path.string(), nullptr, nullptr);
    first.record("run_start");
    REQUIRE_THROWS_MATCHES(loom::audit::AuditLog(path.string(), nullptr, nullptr), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"another process", "at once"}));
    first.record("run_end");
  }
  loom::audit::AuditLog(path.string(), nullptr, nullptr).record("run_start");  // free again
  const auto r = loom::audit::verify_audit_file(path.string(), nullptr);
  CHECK(r.ok());
  CHECK(r.records == 3);
}

TEST_CASE("audit fields that are not UTF-8 are written as U+FFFD, and the log verifies", "[audit]") {
  const fs::path path = fresh("utf8");
  {
    loom::audit::AuditLog log(path.string(), nullptr, nullptr);
    log.record("data_open", {{"path", std::string("shard_\xff.bin")}});
  }
  CHECK(records(path)[0]["path"] == "shard_\xef\xbf\xbd.bin");
  CHECK(loom::audit::verify_audit_file(path.string(), nullptr).ok());
}

using loom::test::FileSizeLimit;

TEST_CASE("a short write to the audit log is cut off, so the log still verifies and continues", "[audit]") {
  const fs::path path = fresh("short");
  loom::audit::AuditLog log(path.string(), nullptr, nullptr);
  log.record("run_start");
  const std::string before = read(path);
  std::string failure;
  {
    const FileSizeLimit limit(before.size() + 10);  // room for 10 bytes of the next record
    try {
      log.record("data_open", {{"path", std::string(200, 'x')}});
    } catch (const loom::Error& e) {
      failure = e.what();
    }
  }
  CHECK_THAT(failure, Catch::Contains("short write") && Catch::Contains("cut off"));
  CHECK(read(path) == before);
  log.record("run_end");  // the chain goes on from the last whole record
  const auto r = loom::audit::verify_audit_file(path.string(), nullptr);
  CHECK(r.ok());
  CHECK(r.records == 2);
  CHECK(r.last_seq == 1);
}
