// train_gpt --audit-log FILE: the run's records in loom's tamper-evident audit log
// (audit/audit_log.hpp), keyed with the run's key when it has one (--key-file / LOOM_KEY_FILE).
//   run_start           user, host, ranks, command line, configuration digest, loom build, keyed
//   rank_start          each rank's device (UUID, or MIG instance) and host
//   data_open           every data file the run reads: path, bytes, BLAKE2b-256 (rank 0 reads them)
//   weights_loaded      --init-from: the source, and each of its files' BLAKE2b-256
//   checkpoint_loaded   the checkpoint resumed from, and checkpoint_written for every save: path,
//                       step, each file's BLAKE2b-256 as stored (encrypted files: their ciphertext).
//                       A written checkpoint is digested by a thread of rank 0's while training
//                       goes on (a GPT-2 checkpoint is 1.5 GB: seconds of BLAKE2b); its record
//                       follows when done; a stop and the end wait for it, and pruning for the
//                       digests of the checkpoints it deletes.
//   stop                a signal or the time limit, and what was saved
//   rank_end, run_end   each rank's device-seconds (wall time on its device), then the exit code,
//                       the steps and the error of a failed run
// Records of every rank go to rank 0 at start-up and at the end (the points every rank reaches
// together; a background save commits when each rank next looks, so its record is rank 0's
// alone). Without --audit-log every call does nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/audit/audit_log.hpp"
#include "loom/comm/world.hpp"
#include "loom/io/checkpoint_writer.hpp"
#include "run_config.hpp"

namespace train_gpt {

class RunAudit {
 public:
  // Collective over the world (opening the log is agreed). argv: the command line, recorded.
  RunAudit(const RunConfig& config, loom::World& world, int argc, char** argv);
  // Waits for the checkpoint digests still being taken (their records are written).
  ~RunAudit();
  RunAudit(const RunAudit&) = delete;
  RunAudit& operator=(const RunAudit&) = delete;
  bool enabled() const noexcept { return log_.enabled(); }

  // Collective: run_start, every rank's device, and the data files.
  void start(const std::string& devices, const std::string& configuration, const std::vector<std::string>& data_files);
  void weights_loaded(const std::string& source);
  void checkpoint_loaded(const std::string& dir, std::int64_t step);
  // Queued on rank 0: the files are digested in the background.
  void checkpoint_written(const loom::io::SaveReport& save);
  // Before checkpoints are deleted: waits until the digests of those queued are recorded.
  void settle_before_deleting(const std::vector<std::string>& doomed);
  void stopped(const std::string& why, const std::string& saved);
  // The steps done so far, for the end record.
  void progress(std::int64_t steps) noexcept { steps_ = steps; }
  // collective: the ranks end together (a normal return); else rank 0 writes its own end alone.
  // (A failed rank takes part in no collective: the others may be inside a training collective,
  // and a gather there would pair with the wrong call. The launcher ends them when it exits.)
  void end(int exit_code, const std::string& error, bool collective);

 private:
  void digest_loop();
  void settle_where(const std::function<bool(const std::string&)>& done);

  loom::audit::AuditLog log_;
  std::mutex mutex_;  // rank 0: log_ is written by the caller and the digest thread
  std::condition_variable changed_;
  std::deque<loom::io::SaveReport> digests_;  // queued or in progress (front)
  bool stopping_ = false;
  std::thread digester_;
  loom::World& world_;
  std::string command_line_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::int64_t steps_ = 0;
  bool ended_ = false;
};

}  // namespace train_gpt
