// The audit log's chain (audit/audit_chain.hpp), against libsodium's BLAKE2b computed here over
// the stored bytes: a log written by AuditLog verifies, each record's hash is BLAKE2b of its line
// before the hash member and its prev the record before's; and each kind of tampering is named at
// the right line and seq: an edited byte, an edit whose hash was recomputed (caught by the next
// record unkeyed, at once when keyed), a removed record (first, middle), two swapped records, an
// edited seq, a cut-off last line, a keyed log without its key or with another.
#include <catch2/catch.hpp>
#include <sodium.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "loom/audit/audit_chain.hpp"
#include "loom/audit/audit_log.hpp"
#include "loom/crypt/key.hpp"

namespace fs = std::filesystem;
using loom::audit::Finding;

namespace {

std::string blake2b_hex(const std::string& bytes, const unsigned char* key = nullptr, std::size_t key_bytes = 0) {
  unsigned char out[32];
  crypto_generichash(out, sizeof out, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), key, key_bytes);
  return loom::crypt::to_hex(out);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A log of one run with four records, written by AuditLog.
std::string written_log(const std::string& name, std::shared_ptr<const loom::crypt::SecretKey> key = nullptr) {
  const fs::path path = fs::temp_directory_path() / ("loom_test_audit_chain_" + name + ".jsonl");
  fs::remove(path);
  {
    loom::audit::AuditLog log(path.string(), nullptr, key);
    nlohmann::json start = {{"keyed", key != nullptr}, {"user", "tester"}};
    if (key) start["key_id"] = key->id_hex();
    log.record("run_start", start);
    log.record("data_open", {{"path", "a.bin"}, {"bytes", 10}});
    log.record("checkpoint_written", {{"path", "run/step_1"}});
    log.record("run_end", {{"exit_code", 0}});
  }
  const std::string text = read(path);
  fs::remove(path);
  return text;
}

Finding::Kind kind_of(const loom::audit::VerifyResult& r) {
  REQUIRE(r.problem.has_value());
  return r.problem->kind;
}

// Rewrites line i (0-based) with its value `from` replaced by `to`, and optionally its hash
// recomputed unkeyed, as someone who can write the file but has no key would.
std::string edit(std::vector<std::string> lines, std::size_t i, const std::string& from, const std::string& to,
                 bool recompute) {
  std::string& line = lines[i];
  line.replace(line.find(from), from.size(), to);
  if (recompute) {
    const std::size_t at = line.rfind(",\"hash\":\"");
    line = line.substr(0, at) + ",\"hash\":\"" + blake2b_hex(line.substr(0, at)) + "\"}";
  }
  return joined(lines);
}

}  // namespace

TEST_CASE("an audit log's records are BLAKE2b-chained over their stored bytes, and it verifies", "[audit]") {
  const std::string text = written_log("chain");
  const std::vector<std::string> lines = lines_of(text);
  REQUIRE(lines.size() == 4);
  std::string prev(64, '0');
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    const nlohmann::json j = nlohmann::json::parse(lines[i]);
    CHECK(j["seq"] == static_cast<int>(i));
    CHECK(j["prev"] == prev);
    const std::size_t at = lines[i].rfind(",\"hash\":\"");
    CHECK(j["hash"] == blake2b_hex(lines[i].substr(0, at)));
    CHECK(lines[i].substr(0, 7) == "{\"seq\":");
    prev = j["hash"].get<std::string>();
  }
  const loom::audit::VerifyResult r = loom::audit::verify_audit_text(text, nullptr);
  CHECK(r.ok());
  CHECK(r.records == 4);
  CHECK(r.runs == 1);
  CHECK(r.last_hash == prev);
  CHECK(r.notes.empty());
  CHECK(loom::audit::verify_audit_text("", nullptr).ok());
}

TEST_CASE("each kind of tampering with an audit log is named at its line and seq", "[audit]") {
  const std::string text = written_log("tamper");
  const std::vector<std::string> lines = lines_of(text);
  using loom::audit::verify_audit_text;

  SECTION("an edited value") {
    const auto r = verify_audit_text(edit(lines, 1, "\"bytes\":10", "\"bytes\":11", false), nullptr);
    CHECK(kind_of(r) == Finding::Kind::edited);
    CHECK((r.problem->line == 2 && r.problem->seq == 1));
    CHECK_THAT(r.problem->message, Catch::Contains("edited: line 2 (seq 1)"));
    CHECK(r.records == 1);
  }
  SECTION("an edit with its hash recomputed: the next record names it") {
    const auto r = verify_audit_text(edit(lines, 1, "a.bin", "b.bin", true), nullptr);
    CHECK(kind_of(r) == Finding::Kind::edited);
    CHECK((r.problem->line == 3 && r.problem->seq == 2));
    CHECK_THAT(r.problem->message, Catch::Contains("not the hash of line 2 (seq 1)"));
  }
  SECTION("a removed record") {
    std::vector<std::string> fewer = lines;
    fewer.erase(fewer.begin() + 1);
    const auto r = verify_audit_text(joined(fewer), nullptr);
    CHECK(kind_of(r) == Finding::Kind::removed);
    CHECK((r.problem->line == 2 && r.problem->seq == 2));
    CHECK_THAT(r.problem->message, Catch::Contains("seq 1 removed"));
  }
  SECTION("the first record removed") {
    const auto r = verify_audit_text(joined({lines.begin() + 1, lines.end()}), nullptr);
    CHECK(kind_of(r) == Finding::Kind::removed);
    CHECK((r.problem->line == 1 && r.problem->seq == 1));
    CHECK_THAT(r.problem->message, Catch::Contains("seq 0 removed"));
  }
  SECTION("two records swapped") {
    std::vector<std::string> swapped = lines;
    std::swap(swapped[1], swapped[2]);
    const auto r = verify_audit_text(joined(swapped), nullptr);
    CHECK(kind_of(r) == Finding::Kind::reordered);
    CHECK((r.problem->line == 2 && r.problem->seq == 2));
    CHECK_THAT(r.problem->message, Catch::Contains("seq 1 should come here but is at line 3"));
  }
  SECTION("a record moved back") {
    std::vector<std::string> moved = {lines[0], lines[1], lines[3], lines[2]};
    CHECK(kind_of(verify_audit_text(joined(moved), nullptr)) == Finding::Kind::reordered);
  }
  SECTION("a record repeated") {
    std::vector<std::string> repeated = {lines[0], lines[1], lines[1], lines[2]};
    const auto r = verify_audit_text(joined(repeated), nullptr);
    CHECK(kind_of(r) == Finding::Kind::reordered);
    CHECK(r.problem->line == 3);
  }
  SECTION("the first record's prev edited, its hash recomputed") {
    const auto r = verify_audit_text(edit(lines, 0, std::string(64, '0'), std::string(63, '0') + "1", true), nullptr);
    CHECK(kind_of(r) == Finding::Kind::edited);
    CHECK_THAT(r.problem->message, Catch::Contains("edited: line 1 (seq 0): seq 0's prev is not the chain's start"));
  }
  SECTION("an edited seq") {
    const auto r = verify_audit_text(edit(lines, 2, "\"seq\":2", "\"seq\":7", true), nullptr);
    CHECK(kind_of(r) == Finding::Kind::edited);
    CHECK(r.problem->line == 3);
  }
  SECTION("a cut-off last line") {
    const auto r = verify_audit_text(text.substr(0, text.size() - 20), nullptr);
    CHECK(kind_of(r) == Finding::Kind::truncated);
    CHECK(r.problem->line == 4);
  }
  SECTION("the last record removed: not provable, but noted") {
    const auto r = verify_audit_text(joined({lines.begin(), lines.end() - 1}), nullptr);
    CHECK(r.ok());
    REQUIRE(r.notes.size() == 1);
    CHECK_THAT(r.notes[0], Catch::Contains("no run_end"));
  }
  SECTION("not a record") {
    std::vector<std::string> junk = lines;
    junk.insert(junk.begin() + 2, "hello");
    const auto r = verify_audit_text(joined(junk), nullptr);
    CHECK(kind_of(r) == Finding::Kind::malformed);
    CHECK(r.problem->line == 3);
  }
}

TEST_CASE("a keyed audit log needs its key, and an edit with a recomputed hash fails at once", "[audit]") {
  const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
  const std::string text = written_log("keyed", key);
  CHECK(loom::audit::verify_audit_text(text, key.get()).ok());
  CHECK(loom::audit::verify_audit_text(text, key.get()).keyed);
  const auto without = loom::audit::verify_audit_text(text, nullptr);
  CHECK(kind_of(without) == Finding::Kind::key);
  CHECK_THAT(without.problem->message, Catch::Contains(key->id_hex()));
  const loom::crypt::SecretKey other = loom::crypt::SecretKey::generate();
  CHECK(kind_of(loom::audit::verify_audit_text(text, &other)) == Finding::Kind::key);
  // The keyed hash is BLAKE2b keyed with the KDF subkey "loomaudt" #1 of the key.
  const std::vector<std::string> lines = lines_of(text);
  unsigned char subkey[32];
  crypto_kdf_derive_from_key(subkey, sizeof subkey, 1, "loomaudt", key->material());
  const std::size_t at = lines[1].rfind(",\"hash\":\"");
  CHECK(nlohmann::json::parse(lines[1])["hash"] == blake2b_hex(lines[1].substr(0, at), subkey, sizeof subkey));
  // A keyed log without its first record is a removal, not an unkeyed log, with the key or without.
  for (const loom::crypt::SecretKey* k : {key.get(), static_cast<const loom::crypt::SecretKey*>(nullptr)}) {
    const auto headless = loom::audit::verify_audit_text(joined({lines.begin() + 1, lines.end()}), k);
    CHECK(kind_of(headless) == Finding::Kind::removed);
    CHECK_THAT(headless.problem->message, Catch::Contains("removed: line 1 (seq 1): seq 0 removed"));
  }
  // Without the key, a recomputed hash cannot match: the edited record itself is named.
  const auto r = loom::audit::verify_audit_text(edit(lines, 1, "a.bin", "b.bin", true), key.get());
  CHECK(kind_of(r) == Finding::Kind::edited);
  CHECK(r.problem->line == 2);
}

TEST_CASE("a keyed audit log rewritten without its key (a downgrade to unkeyed) fails with the key", "[audit]") {
  const auto key = std::make_shared<const loom::crypt::SecretKey>(loom::crypt::SecretKey::generate());
  std::vector<std::string> lines = lines_of(written_log("downgrade", key));
  // What someone without the key can do: drop the keying and recompute every hash and prev.
  std::string prev(64, '0');
  for (std::string& line : lines) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    j.erase("hash");
    if (j.contains("keyed")) j["keyed"] = false;
    j.erase("key_id");
    j["prev"] = prev;
    std::string body = j.dump();
    body.pop_back();
    prev = blake2b_hex(body);
    line = body + ",\"hash\":\"" + prev + "\"}";
  }
  const std::string forged = joined(lines);
  CHECK(loom::audit::verify_audit_text(forged, nullptr).ok());  // unkeyed, nothing can tell
  const auto r = loom::audit::verify_audit_text(forged, key.get());
  CHECK(kind_of(r) == Finding::Kind::key);
  CHECK((r.problem->line == 1 && r.problem->seq == 0));
  CHECK_THAT(r.problem->message, Catch::Contains("not keyed, but a key was given"));
}

TEST_CASE("an audit record's seq must be an integer from 0 to 2^53", "[audit]") {
  const std::string zeros(64, '0');
  for (const std::string seq : {"-1", "9007199254740993", "9223372036854775807", "18446744073709551615", "1.5", "\"0\""}) {
    INFO(seq);
    const std::string line =
        "{\"seq\":" + seq + ",\"time\":\"t\",\"rank\":0,\"event\":\"e\",\"prev\":\"" + zeros + "\",\"hash\":\"" + zeros + "\"}\n";
    const auto r = loom::audit::verify_audit_text(line, nullptr);
    CHECK(kind_of(r) == Finding::Kind::malformed);
    CHECK_THAT(r.problem->message, Catch::Contains("malformed: line 1:") && Catch::Contains("seq"));
  }
}
