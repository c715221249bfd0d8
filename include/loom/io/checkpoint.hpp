// Training checkpoints. A checkpoint is a directory <run>/step_<8 digits>/ holding
//   model.safetensors      the parameters as the model stores them (metadata: the model config)
//   optimizer.safetensors  the optimizer's named state (e.g. "<param>.exp_avg", "<param>.master")
//   state.json             progress (step, data position and seed, loss scaler), config,
//                          precision, and the size and CRC-32 of both files
// It is written as <run>/.step_<N>.tmp/ (every file fsync'ed), renamed into place, and then
// <run>/latest is replaced atomically to name it: a crash at any point leaves the previous
// checkpoint, and `latest`, intact. Loading verifies sizes and checksums before reading, and
// refuses a checkpoint whose config, precision or optimizer differs from the run's, naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/nn/gpt.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::io {

struct TrainingProgress {
  std::int64_t step = 0;           // optimizer steps completed (the schedule's position)
  std::int64_t data_position = 0;  // batches taken from this rank's data source
  std::uint64_t data_seed = 0;     // the data stream's seed (all randomness of a run)
  int data_ranks = 1;              // ranks the data stream is partitioned over (data parallelism)
  float loss_scale = 1.0f;
  std::int64_t loss_scale_clean_steps = 0;
  std::int64_t skipped_steps = 0;
};

// Returns the new checkpoint's directory.
std::string save_checkpoint(const std::string& run_dir, const nn::GPT& model, const optim::Optimizer& optimizer,
                            const TrainingProgress& progress);

// path: a checkpoint directory, or a run directory (its `latest` checkpoint). Restores the
// model's parameters and the optimizer's state and step count; returns the progress.
TrainingProgress load_checkpoint(const std::string& path, nn::GPT& model, optim::Optimizer& optimizer);

// The checkpoint `latest` names in run_dir, if there is one.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

}  // namespace loom::io
