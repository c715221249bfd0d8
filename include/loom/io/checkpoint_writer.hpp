// Saving the checkpoints of one model and optimizer, synchronously or while training goes on.
//
// A synchronous save writes and commits before it returns, like io::save_checkpoint. An
// asynchronous save copies this rank's part of the checkpoint (the pieces it writes into its
// loom-checkpoint-2 file) into host memory at a step boundary, pinned when the model is on a GPU,
// and returns; a background thread then writes and fsyncs the file and takes part in the commit
// while the next steps run. The host copy is kept for the next save: a rank holds its own share
// once, and allocates it once.
//
// The commit's collectives run on a communicator split off for checkpoints, so the background
// thread never shares one with training, and that communicator's timeout is the commit deadline:
// commit_slack + this rank's bytes / min_write_bytes_per_second (or the write rate limit when it is
// lower), the longest over the ranks, agreed when the writer is built. A slow disk that is still writing does not abort the job after the training
// communicator's timeout; a rank that never comes fails the save at the deadline.
//
// One save at a time: a new save (either kind) first waits for the one in flight. A failure on
// any rank fails the save on every rank and leaves the previous checkpoint the one `latest` names;
// a background save's failure is thrown by the next wait(), save() or save_async(), on every rank
// alike, and the next save splits a fresh checkpoint communicator (a timeout aborts one). A crash
// or kill during a background write leaves only a .step_<N>.tmp folder behind, which
// io::remove_stale_temporaries deletes. The destructor waits for a save in flight, or, when it runs
// because of an exception, abandons it (aborting the checkpoint communicator, which tells the
// peers at once) so that the error is not held up by a commit a failed peer will not join.
// On NCCL the commit's few small agreements are collectives on a second NCCL communicator, issued
// from the background thread while training's run: not yet run on a GPU (see issue 27's note).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/model/model.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::io {

namespace detail {
struct ShardedSave;  // src/io/sharded_checkpoint.hpp
}

struct CheckpointWriterOptions {
  // The commit deadline (see above): time enough for the largest rank's file at this rate.
  double min_write_bytes_per_second = 20e6;
  std::chrono::milliseconds commit_slack = std::chrono::minutes(2);
  // > 0: each rank writes no faster than this (bytes/s), leaving the disk to training's reads;
  // synchronous saves too.
  double max_write_bytes_per_second = 0;
};

struct SaveReport {
  std::string where;         // the committed checkpoint directory
  std::int64_t step = 0;
  bool asynchronous = false;
  std::uint64_t bytes = 0;   // the tensor data this rank wrote
  // How long the caller was held up: the whole save (synchronous), or the wait for the previous
  // save plus the copy to host memory (asynchronous).
  double blocked_seconds = 0;
  double write_seconds = 0;  // writing, fsync and commit (asynchronous: in the background)
};

class CheckpointWriter {
 public:
  // comm: the ranks that save together (null: one process). Collective: the ranks agree on the
  // commit deadline and split the checkpoint communicator. The model, optimizer and comm must
  // outlive the writer; their layout (ranks, ZeRO stage, parameters) must not change.
  CheckpointWriter(const model::Model& model, const optim::Optimizer& optimizer, comm::Communicator* comm,
                   CheckpointWriterOptions options = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Saves the model and optimizer as they are now, with progress, into run_dir (loom-checkpoint-2),
  // and returns when it is committed. Collective.
  SaveReport save(const std::string& run_dir, const TrainingProgress& progress);
  // The same, returning once this rank's part is in host memory; the rest happens in the
  // background (see above). Collective: the ranks agree that every copy succeeded before any
  // background write starts. The model and optimizer may change as soon as it returns.
  void save_async(const std::string& run_dir, const TrainingProgress& progress);
  // Blocks until no save is in flight; throws the error of a background save that failed (once).
  void wait();
  // The reports of background saves that have committed since the last call, oldest first. Never
  // blocks or throws; a failed save has no report (wait() throws its error).
  std::vector<SaveReport> finished();
  bool in_flight() const noexcept;

  std::chrono::milliseconds commit_deadline() const noexcept { return deadline_; }
  // The tensor data of this rank's part of a checkpoint (what a snapshot holds in host memory).
  std::uint64_t bytes_per_save() const noexcept { return bytes_; }

 private:
  struct Flight;
  // Moves a finished flight's outcome into reports_ or failure_.
  void settle(bool block);
  // What every save does first: waits for the one in flight, takes a fresh checkpoint
  // communicator after a failed save, and lists this rank's pieces (agreed: collective).
  detail::ShardedSave begin(const TrainingProgress& progress);
  void agree(const std::exception_ptr& failure, const char* what);
  comm::Communicator* checkpoint_comm() const noexcept;

  const model::Model& model_;
  const optim::Optimizer& optimizer_;
  comm::Communicator* comm_;
  CheckpointWriterOptions options_;
  std::uint64_t bytes_ = 0;
  std::chrono::milliseconds deadline_{0};
  std::unique_ptr<comm::Communicator> checkpoint_comm_;  // split from comm_ with the deadline
  std::vector<Tensor> staging_;                          // the host copies of the last snapshot
  std::vector<SaveReport> reports_;
  std::exception_ptr failure_;
  bool resplit_ = false;  // a save failed: the next one splits a fresh checkpoint communicator
  std::unique_ptr<Flight> flight_;  // last: its thread is joined before the rest goes
};

}  // namespace loom::io
