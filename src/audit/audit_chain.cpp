#include "loom/audit/audit_chain.hpp"

#include <nlohmann/json.hpp>
#include <sodium.h>

#include <array>
#include <fstream>
#include <iterator>
#include <map>

#include "loom/core/error.hpp"

namespace loom::audit {

namespace {

constexpr std::size_t hash_bytes = 32;
constexpr std::string_view hash_member = ",\"hash\":\"";
constexpr std::int64_t max_seq = std::int64_t{1} << 53;

bool is_hex_hash(std::string_view text) {
  if (text.size() != 2 * hash_bytes) return false;
  for (const char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A record as read: its body (what its hash covers), the hash it carries, and its fields.
struct Line {
  std::string_view body, hash;
  nlohmann::json json;
};

// Splits a line into body and hash and parses it; the reason when it is not a record.
std::optional<std::string> read_line(std::string_view text, Line& out) {
  const std::size_t at = text.rfind(hash_member);
  if (at == std::string_view::npos || !text.ends_with("\"}") ||
      !is_hex_hash(text.substr(at + hash_member.size(), text.size() - at - hash_member.size() - 2))) {
    return "it does not end with a 64-digit \"hash\" member";
  }
  out.body = text.substr(0, at);
  out.hash = text.substr(at + hash_member.size(), 2 * hash_bytes);
  out.json = nlohmann::json::parse(text, nullptr, false);
  if (out.json.is_discarded() || !out.json.is_object()) return "it is not a JSON object";
  const nlohmann::json& j = out.json;
  const auto has = [&](const char* name) { return j.contains(name); };
  // seq stays within JSON's exact integers (2^53), so seq + 1 never overflows in the walk below.
  if (!has("seq") || !j["seq"].is_number_integer() || j["seq"].get<std::int64_t>() < 0 ||
      j["seq"].get<std::int64_t>() > max_seq) {
    return "it has no seq from 0 to 2^53";
  }
  if (!has("time") || !j["time"].is_string()) return "it has no time";
  if (!has("rank") || !j["rank"].is_number_integer()) return "it has no rank";
  if (!has("event") || !j["event"].is_string()) return "it has no event";
  if (!has("prev") || !j["prev"].is_string() || !is_hex_hash(j["prev"].get<std::string>())) return "it has no prev hash";
  if (!has("hash") || !j["hash"].is_string() || j["hash"].get<std::string>() != out.hash) {
    return "its hash member is not the last one";
  }
  return std::nullopt;
}

std::string line_name(std::size_t line, std::int64_t seq) {
  std::string name = "line ";
  name += std::to_string(line);
  if (seq >= 0) name.append(" (seq ").append(std::to_string(seq)).append(")");
  return name;
}

}  // namespace

std::string genesis_hash() { return std::string(2 * hash_bytes, '0'); }

bool is_reserved_field(std::string_view name) {
  for (const char* reserved : {"seq", "time", "rank", "event", "prev", "hash"}) {
    if (name == reserved) return true;
  }
  return false;
}

std::string record_hash(std::string_view body, const crypt::SecretKey* key) {
  crypt::ensure_sodium();
  std::array<unsigned char, hash_bytes> out{};
  const auto* data = reinterpret_cast<const unsigned char*>(body.data());
  if (key == nullptr) {
    crypto_generichash(out.data(), out.size(), data, body.size(), nullptr, 0);
  } else {
    // A subkey of its own: the job's key is never used directly for two purposes.
    std::array<unsigned char, crypto_kdf_KEYBYTES> subkey{};
    static_assert(crypto_kdf_KEYBYTES == crypt::key_bytes);
    crypto_kdf_derive_from_key(subkey.data(), subkey.size(), 1, "loomaudt", key->material());
    crypto_generichash(out.data(), out.size(), data, body.size(), subkey.data(), subkey.size());
    sodium_memzero(subkey.data(), subkey.size());
  }
  return crypt::to_hex(out);
}

std::string_view to_string(Finding::Kind kind) {
  switch (kind) {
    case Finding::Kind::edited: return "edited";
    case Finding::Kind::removed: return "removed";
    case Finding::Kind::reordered: return "reordered";
    case Finding::Kind::malformed: return "malformed";
    case Finding::Kind::truncated: return "truncated";
    case Finding::Kind::key: return "key";
  }
  return "?";
}

VerifyResult verify_audit_text(std::string_view text, const crypt::SecretKey* key) {
  VerifyResult result;
  result.last_hash = genesis_hash();
  std::vector<std::string_view> lines;
  for (std::size_t from = 0; from < text.size();) {
    const std::size_t end = text.find('\n', from);
    lines.push_back(text.substr(from, end == std::string_view::npos ? std::string_view::npos : end - from));
    from = end == std::string_view::npos ? text.size() : end + 1;
  }
  const bool unterminated = !text.empty() && text.back() != '\n';
  // Where each seq is, for telling a record that moved from one that is gone.
  std::map<std::int64_t, std::size_t> line_of_seq;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, false);
    if (j.is_object() && j.contains("seq") && j["seq"].is_number_integer()) line_of_seq.emplace(j["seq"].get<std::int64_t>(), i + 1);
  }
  const auto problem = [&](Finding::Kind kind, std::size_t line, std::int64_t seq, const std::string& why) {
    result.problem = Finding{kind, line, seq, std::string(to_string(kind)) + ": " + line_name(line, seq) + ": " + why};
    return result;
  };
  const crypt::SecretKey* chain_key = nullptr;
  std::string last_event;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::size_t number = i + 1;
    Line record;
    if (const std::optional<std::string> why = read_line(lines[i], record)) {
      if (unterminated && i + 1 == lines.size()) {
        return problem(Finding::Kind::truncated, number, -1, "the last line is incomplete (" + *why +
                       "): the file was cut short, or a write was interrupted");
      }
      return problem(Finding::Kind::malformed, number, -1, "not an audit record: " + *why);
    }
    const std::int64_t seq = record.json["seq"].get<std::int64_t>();
    const std::int64_t expected = result.last_seq + 1;
    // A record that chains to the one before but has another seq had its seq edited: a removal or
    // a move would have broken the chain too.
    if (seq != expected && record.json["prev"].get<std::string>() == result.last_hash) {
      return problem(Finding::Kind::edited, number, seq,
                     (i == 0 ? std::string("it is the chain's first record (its prev is the start)")
                             : "it follows seq " + std::to_string(result.last_seq) + " in the chain") +
                         " but says seq " + std::to_string(seq) + ": the record was edited");
    }
    if (seq != expected) {
      const auto moved = line_of_seq.find(expected);
      if (seq < expected) {
        return problem(Finding::Kind::reordered, number, seq, "seq " + std::to_string(seq) + " comes after seq " +
                       std::to_string(result.last_seq) + ": records were reordered or repeated");
      }
      if (moved != line_of_seq.end() && moved->second > number) {
        return problem(Finding::Kind::reordered, number, seq, "seq " + std::to_string(expected) +
                       " should come here but is at line " + std::to_string(moved->second) +
                       ": records were reordered");
      }
      const std::string missing = seq - expected == 1 ? "seq " + std::to_string(expected)
                                                      : "seqs " + std::to_string(expected) + " to " + std::to_string(seq - 1);
      return problem(Finding::Kind::removed, number, seq, missing + " removed before this record");
    }
    if (i == 0) {
      // The log's keying, from its first record, once the sequence shows it is the first (a keyed
      // log whose first record was removed is a removal, not an unkeyed log).
      const nlohmann::json& j = record.json;
      result.keyed = j.contains("keyed") && j["keyed"].is_boolean() && j["keyed"].get<bool>();
      if (result.keyed) {
        result.key_id = j.contains("key_id") && j["key_id"].is_string() ? j["key_id"].get<std::string>() : "";
        if (key == nullptr) {
          return problem(Finding::Kind::key, number, seq, "the log is keyed (key id " + result.key_id +
                         "): verifying it needs that key (--key-file or LOOM_KEY_FILE)");
        }
        if (key->id_hex() != result.key_id) {
          return problem(Finding::Kind::key, number, seq, "the log is keyed with key id " + result.key_id +
                         ", not the given key's " + key->id_hex());
        }
        chain_key = key;
      } else if (key != nullptr) {
        // Not a note: whoever rewrites a keyed log without its key can only make an unkeyed one,
        // so a log that should be keyed (the caller has its key) and is not fails here.
        return problem(Finding::Kind::key, number, seq, "the log is not keyed, but a key was given (key id " +
                       key->id_hex() + "): a keyed log rewritten by someone without its key looks like this; "
                       "a log written without a key is verified without one (no --key-file, LOOM_KEY_FILE unset)");
      }
    }
    if (record_hash(record.body, chain_key) != record.hash) {
      return problem(Finding::Kind::edited, number, seq, "its contents do not match its hash: the record was edited");
    }
    if (record.json["prev"].get<std::string>() != result.last_hash) {
      return problem(Finding::Kind::edited, number, seq,
                     i == 0 ? std::string("seq 0's prev is not the chain's start (64 zeros): the record was edited")
                            : "its prev is not the hash of " + line_name(number - 1, seq - 1) +
                                  ": that record was edited (its hash recomputed) or replaced");
    }
    last_event = record.json["event"].get<std::string>();
    result.runs += last_event == "run_start";
    result.last_hash = std::string(record.hash);
    result.last_seq = seq;
    ++result.records;
  }
  if (result.records > 0 && last_event != "run_end") {
    result.notes.push_back("the last run has no run_end record: it is still running, it crashed, or records were "
                           "removed from the end");
  }
  if (unterminated) result.notes.push_back("the file does not end with a newline");
  return result;
}

VerifyResult verify_audit_file(const std::string& path, const crypt::SecretKey* key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open the audit log '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCategory::io, "cannot read the audit log '", path, "'");
  return verify_audit_text(text, key);
}

}  // namespace loom::audit
