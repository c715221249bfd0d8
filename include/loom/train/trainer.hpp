// One optimizer step of GPT training, the way mixed-precision trainers do it: gradient
// accumulation over micro-batches (the loss of each divided by their number), dynamic loss
// scaling for fp16 (unscale + inf/NaN check in one pass; a bad step is skipped and counted),
// clipping by global norm (folded into the optimizer's gradient scale), the learning rate from a
// cosine schedule, and AdamW or SGD with momentum. Everything a checkpoint needs is in progress()/restore().
// With a GradientReducer it trains data-parallel: every micro-batch but the last runs inside
// no_sync(), the reducer averages the gradients over the ranks before the loss scaler, clipping
// and the optimizer see them (so every rank takes the same decisions), and the step's loss and
// token count are the job's.
#pragma once

#include <cstdint>
#include <memory>

#include "loom/data/batch_source.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/nn/gpt.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/optim/sgd.hpp"
#include "loom/optim/loss_scaler.hpp"
#include "loom/optim/schedule.hpp"

namespace loom::train {

struct TrainerOptions {
  std::int64_t grad_accumulation = 1;  // micro-batches per optimizer step
  float max_grad_norm = 1.0f;          // <= 0: no clipping
  optim::CosineSchedule schedule{};
  enum class OptimizerKind { adamw, sgd } optimizer = OptimizerKind::adamw;
  optim::AdamWOptions adamw{};
  optim::SgdOptions sgd{};
  std::uint64_t data_seed = 0;         // recorded in checkpoints
};

struct StepResult {
  std::int64_t step = 0;   // 1-based number of this step
  float loss = 0;          // mean over the micro-batches (and the ranks, data-parallel)
  float grad_norm = 0;     // before clipping (NaN/inf on a skipped step)
  float lr = 0;
  bool skipped = false;    // a non-finite gradient (fp16 overflow, or inf/NaN anywhere): no update
  std::int64_t tokens = 0; // tokens processed (inputs of every micro-batch, on every rank)
  double seconds = 0;      // wall time of the step, synchronized
};

class Trainer {
 public:
  // reducer: nullptr for one process; otherwise built over model.parameters() before this trainer
  // (its construction gives every rank rank 0's weights, which the optimizer then copies).
  Trainer(nn::GPT& model, data::BatchSource& data, const TrainerOptions& options,
          ddp::GradientReducer* reducer = nullptr);

  StepResult step(StreamRef stream = {});

  std::int64_t steps_done() const noexcept { return steps_done_; }
  std::int64_t skipped_steps() const noexcept { return skipped_steps_; }
  io::TrainingProgress progress() const;
  // Continues a run from a loaded checkpoint's progress (the model and optimizer state are
  // restored by io::load_checkpoint): step counter, data position, loss scaler.
  void restore(const io::TrainingProgress& progress);

  // The data-parallel ranks (1 without a reducer).
  int ranks() const noexcept;
  nn::GPT& model() noexcept { return model_; }
  optim::Optimizer& optimizer() noexcept { return *optimizer_; }
  const optim::DynamicLossScaler& loss_scaler() const noexcept { return scaler_; }

 private:
  nn::GPT& model_;
  data::BatchSource& data_;
  TrainerOptions options_;
  ddp::GradientReducer* reducer_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::DynamicLossScaler scaler_;
  std::int64_t steps_done_ = 0, skipped_steps_ = 0;
};

}  // namespace loom::train
