// A tamper-evident audit log of a job (train_gpt --audit-log FILE): what data, checkpoints and
// devices a run used, one JSON record per event in a hash chain (audit/audit_chain.hpp has the
// format and what the chain proves).
//
// Only rank 0 writes. Every rank may record; the other ranks' records wait in memory until
// exchange(), a collective every rank calls at the same points, sends them to rank 0, which
// writes them in rank order, each with its own rank and the time it was recorded (records not
// exchanged before the object goes are lost). Every rank must agree whether the log is enabled
// (a path on all ranks, or the default object on all). A log that exists is read through the
// same descriptor that then appends, and verified before anything is appended: a log that does
// not verify, or is keyed otherwise, is refused by name and left byte for byte as it was; else its
// chain continues (seq and prev), so a resumed run appends to its log. The file is owner-only
// (io/files.hpp's mode, also for a log that existed), opened O_APPEND | O_NOFOLLOW (a symbolic
// link is refused), and locked (flock) so that a second run appending to it at once is refused.
// Each record is one write() of the whole line; a short write (a full disk) is cut off again so
// the log still ends at a whole record. Records of checkpoints, stops and the run's end are
// fsynced (those are what an audit after a crash needs); sync() does it on demand.
//
// The writer stamps "keyed" (and "key_id" when keyed) into the file's first record and every
// "run_start": the verifier reads the log's keying from them. Text that is not UTF-8 (a path's
// stray byte) is written as U+FFFD, since JSON cannot hold it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/crypt/key.hpp"

namespace loom::audit {

class AuditLog {
 public:
  // Disabled: every call does nothing.
  AuditLog();
  // A collective over comm (null: one process): rank 0 opens, verifies and continues path, or
  // creates it; a failure there is an Error on every rank. key: the chain is keyed with it (a new
  // log), or must be (an existing keyed log).
  AuditLog(const std::string& path, comm::Communicator* comm, std::shared_ptr<const crypt::SecretKey> key);
  ~AuditLog();
  AuditLog(AuditLog&&) noexcept;
  AuditLog& operator=(AuditLog&&) noexcept;

  bool enabled() const noexcept { return state_ != nullptr; }
  // This rank's record of `event` with `fields` (an object; the reserved names of
  // audit_chain.hpp are refused by name, and "keyed"/"key_id" unless they say what the log is).
  // Rank 0's is written at once, the others' at exchange().
  void record(const std::string& event, const nlohmann::json& fields = nlohmann::json::object());
  // Collective: the other ranks' records to rank 0, written in rank order.
  void exchange();
  // Rank 0's records so far reach the disk (fsync).
  void sync();
  const std::string& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// BLAKE2b-256 of a file's bytes as they are on disk, streamed (an encrypted file's ciphertext);
// io Error when it cannot be read.
std::string file_digest_hex(const std::string& path);
// The user the process runs as, and the host's name.
std::string current_user();
std::string current_host();
// "2026-12-05T02:18:27.123Z"
std::string utc_now();

}  // namespace loom::audit
