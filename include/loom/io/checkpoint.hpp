// Training checkpoints. A checkpoint is a directory <run>/step_<8 digits>/ holding
//   model.safetensors      the parameters as the model stores them (metadata: the model config)
//   optimizer.safetensors  the optimizer's full state per parameter (e.g. "<param>.exp_avg",
//                          "<param>.master"), whatever the ranks and ZeRO stage that wrote it
//   state.json             progress (step, global batches consumed, data seed, loss scaler),
//                          architecture, precision, and the size and CRC-32 of both files
// It is written as <run>/.step_<N>.tmp/ (every file fsync'ed), renamed into place, and then
// <run>/latest is replaced atomically to name it: a crash at any point leaves the previous
// checkpoint, and `latest`, intact. Loading verifies sizes and checksums before reading, and
// refuses a checkpoint whose architecture, precision or optimizer differs from the run's, naming
// it. A checkpoint loads at any number of ranks and any ZeRO stage: each rank takes its part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/model/model.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::io {

struct TrainingProgress {
  std::int64_t step = 0;           // optimizer steps completed (the schedule's position)
  // Micro-batches taken from the job's data stream by all ranks together: a job of N ranks
  // resumes with each rank at batches_consumed / N of its partition (data/batch_source.hpp).
  std::int64_t batches_consumed = 0;
  std::uint64_t data_seed = 0;     // the data stream's seed (all randomness of a run)
  float loss_scale = 1.0f;
  std::int64_t loss_scale_clean_steps = 0;
  std::int64_t skipped_steps = 0;
};

// How a checkpoint's tensors are laid out in files:
//   sharded       (loom-checkpoint-2, the default) every rank writes the pieces it owns into
//                 rank_<r>.safetensors (io/piece_file.hpp): its ZeRO shards, and 1/N of what
//                 every rank holds; nothing is gathered. A piece table in each file says which
//                 part of which tensor each piece is, so any layout loads it.
//   consolidated  (loom-checkpoint-1) model.safetensors and optimizer.safetensors with whole
//                 tensors, gathered to rank 0, which writes them: what other tools read.
enum class CheckpointLayout { sharded, consolidated };

// Returns the new checkpoint's directory. comm: every rank of the job (the data-parallel group, or
// with tensor parallelism the world: model.tensor_ranks() tells which ranks hold the same blocks),
// or null for one process.
// With a communicator it is a collective, and a failure on any rank fails the save on every rank
// (the previous checkpoint stays the one `latest` names).
std::string save_checkpoint(const std::string& run_dir, const model::Model& model, const optim::Optimizer& optimizer,
                            const TrainingProgress& progress, comm::Communicator* comm = nullptr,
                            CheckpointLayout layout = CheckpointLayout::sharded);

// path: a checkpoint directory, or a run directory (its `latest` checkpoint), of either layout.
// Restores the model's parameters and this rank's part of the optimizer's state and its step
// count; returns the progress. Every rank reads the files itself (no communication); from a
// sharded checkpoint only the pieces that overlap what it holds, each verified by its CRC-32, and
// nothing is changed until all of them are read.
TrainingProgress load_checkpoint(const std::string& path, model::Model& model, optim::Optimizer& optimizer);

// The checkpoint `latest` names in run_dir, if there is one.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);
// path itself when it is a checkpoint directory (it holds state.json), else the checkpoint `latest`
// names in it; an io Error when it is neither.
std::string checkpoint_or_latest(const std::string& path);

// Reads a checkpoint directory's state.json and checks its files without a model (the size and
// CRC-32 of each file; sharded: also the piece tables, which must cover every tensor exactly once);
// returns its step. A damaged or incomplete checkpoint is a corrupt_data (or io) Error
// naming the file and the problem.
std::int64_t verify_checkpoint(const std::string& dir);
// The same for `part` of `parts` readers sharing the work: the state.json, every file's size and
// the piece tables are checked by each, but only the data files i with i % parts == part are read
// for their CRC-32. The ranks of a job, each taking its part, verify a checkpoint together in the
// time one file takes (find_resumable_checkpoint with a communicator).
std::int64_t verify_checkpoint(const std::string& dir, int part, int parts);

// The run directory's checkpoints (src/io/checkpoint_dir.cpp).
struct CheckpointSearch {
  std::optional<std::string> chosen;  // the newest checkpoint that verifies
  std::int64_t step = 0;              // its step
  std::vector<std::string> skipped;   // why each newer candidate was passed over, and what was odd about `latest`
  bool any = false;                   // run_dir holds a committed checkpoint or a `latest` (temporaries do not count)
};

// The newest complete checkpoint in run_dir: the step_<N> directories from the highest step down
// (and the one `latest` names, if it is not among them), the first that verifies. It does not
// trust `latest`: a missing, damaged or absent-target `latest` is noted and the search goes on.
CheckpointSearch find_resumable_checkpoint(const std::string& run_dir);
// The same search made by the ranks of comm together (a collective; Trainer::resume uses it): rank
// 0 lists the candidates and shares the list, the ranks verify each candidate in parts (rank r
// reads the files r, r + N, ...), and a candidate is chosen only when every rank's part verified.
// Every rank gets the same outcome, with the lowest failing rank's reason for each skipped one.
CheckpointSearch find_resumable_checkpoint(const std::string& run_dir, comm::Communicator& comm);

// Deletes the committed checkpoints of run_dir other than the newest `keep` (>= 1), those whose
// step is a multiple of keep_every (when > 0) and the one `latest` names. Returns what it deleted.
std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep, std::int64_t keep_every = 0);
// What prune_checkpoints would delete now, deleting nothing.
std::vector<std::string> prunable_checkpoints(const std::string& run_dir, int keep, std::int64_t keep_every = 0);

// Deletes what interrupted saves left in run_dir (.step_<N>.tmp, and .step_<N>.old unless
// `latest` names it). Returns what it deleted.
std::vector<std::string> remove_stale_temporaries(const std::string& run_dir);

}  // namespace loom::io
