// The audit log's format and its verification: pure functions over text (no files, no ranks).
//
// An audit log is one JSON object per line, appended by the runs that use it, never rewritten:
//   {"seq":0,"time":"2026-12-05T02:18:27.123Z","rank":0,"event":"run_start",<fields>,
//    "prev":"<64 hex>","hash":"<64 hex>"}
// seq counts the file's records from 0 (across runs); prev is the previous record's hash (64 zeros
// for the first); hash is BLAKE2b-256 over the line's bytes up to, not including, ',"hash":"'.
// Each record thus carries the hash of the one before (a hash chain): editing a byte of any
// record breaks its own hash, removing or reordering records breaks the chain and the sequence,
// and verify_audit_text names the first record that was edited, removed or reordered.
//
// What a chain proves depends on the key. Unkeyed, it shows accidental or careless edits, but
// someone who can write the file can recompute every hash after an edit. With a key (the job's
// key file), the hashes are BLAKE2b keyed with a subkey derived from it (crypto_kdf, context
// "loomaudt"): nobody without the key can make a consistent edit. Neither shows records removed
// from the end of the file: the last run's "run_end" record is the check a reader makes (a log
// whose last run has none is noted). The first record of the file and each run's "run_start" say
// whether the log is keyed ("keyed": true/false) and by which key ("key_id", crypt::SecretKey's
// id_hex); a log is keyed or not from its first record on. Verifying with a key demands a keyed
// log: someone without the key could otherwise rewrite a keyed log as an unkeyed one with every
// hash recomputed (a downgrade), and it would pass.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/crypt/key.hpp"

namespace loom::audit {

// The "prev" of a log's first record.
std::string genesis_hash();
// The record hash of `body` (a line without its hash member), keyed when key is given.
std::string record_hash(std::string_view body, const crypt::SecretKey* key);
// The fields every record has, which an event's own fields may not use.
bool is_reserved_field(std::string_view name);

struct Finding {
  enum class Kind { edited, removed, reordered, malformed, truncated, key };
  Kind kind = Kind::malformed;
  std::size_t line = 0;  // 1-based line of the file
  std::int64_t seq = -1; // that line's seq, when it has one
  std::string message;   // names the kind, the line and the seq
};
std::string_view to_string(Finding::Kind kind);

struct VerifyResult {
  std::optional<Finding> problem;  // the first, if any
  std::size_t records = 0;         // records verified (before the problem)
  std::size_t runs = 0;            // run_start records among them
  bool keyed = false;
  std::string key_id;              // of a keyed log
  std::string last_hash;           // the chain's end (genesis_hash() for an empty log)
  std::int64_t last_seq = -1;
  std::vector<std::string> notes;  // not tampering, but worth saying (a last run without run_end)
  bool ok() const noexcept { return !problem.has_value(); }
};

// Checks a whole log; never throws for anything in the text. key: the log's key when it is keyed
// (without it, or with another one, a keyed log is a `key` finding; with it, so is an unkeyed log).
// The first problem is returned with the records verified before it, in this order per line:
// malformed or truncated (not a record: JSON object, seq 0..2^53, time, rank, event, prev, and the
// hash member last), then the sequence (a record that chains to the one before but has another seq
// was edited; a seq that goes back, or whose expected record is further down, is reordered; one
// that skips is removed, so a log without its first record names seq 0), then key (the first
// record, seq 0), then the record's own hash and its prev (edited).
VerifyResult verify_audit_text(std::string_view text, const crypt::SecretKey* key);
// The same for a file (an io Error when it cannot be read).
VerifyResult verify_audit_file(const std::string& path, const crypt::SecretKey* key);

}  // namespace loom::audit
