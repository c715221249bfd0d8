#include "loom/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <optional>

#include "loom/core/error.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/optim/clip.hpp"

namespace loom::train {

namespace {
std::unique_ptr<optim::Optimizer> make_optimizer(const nn::GPT& model, const TrainerOptions& options) {
  if (options.optimizer == TrainerOptions::OptimizerKind::sgd) {
    return std::make_unique<optim::SGD>(model.parameters(), options.sgd);
  }
  return std::make_unique<optim::AdamW>(model.parameters(), options.adamw);
}

optim::LossScalerOptions scaler_options(const nn::Precision& precision) {
  optim::LossScalerOptions options;
  options.enabled = precision.loss_scaling;
  return options;
}
}  // namespace

Trainer::Trainer(nn::GPT& model, data::BatchSource& data, const TrainerOptions& options,
                 ddp::GradientReducer* reducer)
    : model_(model),
      data_(data),
      options_(options),
      reducer_(reducer),
      optimizer_(make_optimizer(model, options)),
      scaler_(scaler_options(model.precision())) {
  require(options.grad_accumulation >= 1, "trainer: grad_accumulation must be >= 1, got ", options.grad_accumulation);
  require(data.vocab_size() <= model.config().vocab_size, "trainer: the data has a vocabulary of ", data.vocab_size(),
          " tokens but the model only ", model.config().vocab_size);
  options.schedule.at(0);  // validates the schedule now rather than at the first step
  if (reducer != nullptr) {
    require(reducer->communicator().device() == model.device(), "trainer: the model lives on ", model.device(),
            " but the gradient reducer's communicator on ", reducer->communicator().device());
  }
}

StepResult Trainer::step(StreamRef stream) {
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  result.step = steps_done_ + 1;
  model_.zero_grad();
  const float micro = static_cast<float>(options_.grad_accumulation);
  double loss_sum = 0;
  if (reducer_ != nullptr) reducer_->set_stream(stream);  // its reductions wait for this step's backward
  try {
    for (std::int64_t i = 0; i < options_.grad_accumulation; ++i) {
      const data::Batch batch = data_.next();
      std::optional<ddp::GradientReducer::NoSync> accumulate_only;
      if (reducer_ != nullptr && i + 1 < options_.grad_accumulation) accumulate_only.emplace(reducer_->no_sync());
      loss_sum += model_.forward(batch.tokens, batch.targets, stream);
      model_.backward(scaler_.scale() / micro, stream);
      result.tokens += batch.tokens.numel();
    }
  } catch (...) {
    if (reducer_ != nullptr) reducer_->abandon_iteration();  // nothing stays in flight into the next step
    throw;
  }
  double loss = loss_sum / static_cast<double>(options_.grad_accumulation);
  if (reducer_ != nullptr) {
    reducer_->synchronize();
    loss = ddp::mean_across_ranks(reducer_->communicator(), loss);
    result.tokens *= reducer_->communicator().size();  // every rank's micro-batches have the same shape
  }
  result.loss = static_cast<float>(loss);
  result.lr = options_.schedule.at(steps_done_);
  const bool finite = scaler_.unscale_and_update(model_.parameters(), stream);
  result.grad_norm = optim::global_grad_norm(model_.parameters(), 1.0f, stream);
  // An inf/NaN gradient never reaches the weights, in any precision (fp16: the scaler backs off).
  result.skipped = !finite || !std::isfinite(result.grad_norm);
  if (result.skipped) ++skipped_steps_;
  if (!result.skipped) {
    optimizer_->step(result.lr, optim::clip_factor(result.grad_norm, options_.max_grad_norm), stream);
    synchronize(stream);
  }
  ++steps_done_;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

int Trainer::ranks() const noexcept { return reducer_ != nullptr ? reducer_->communicator().size() : 1; }

io::TrainingProgress Trainer::progress() const {
  io::TrainingProgress p;
  p.step = steps_done_;
  p.data_position = data_.position();
  p.data_seed = options_.data_seed;
  p.data_ranks = ranks();
  p.loss_scale = scaler_.scale();
  p.loss_scale_clean_steps = scaler_.clean_steps_in_a_row();
  p.skipped_steps = skipped_steps_;
  return p;
}

void Trainer::restore(const io::TrainingProgress& progress) {
  require(progress.data_seed == options_.data_seed, "trainer: the checkpoint's data seed ", progress.data_seed,
          " differs from this run's ", options_.data_seed);
  // Each rank's data position counts batches of a stream partitioned over the job's ranks: with
  // another number of ranks the same position would skip or repeat data.
  require(progress.data_ranks == ranks(), "trainer: the checkpoint was written by a job of ", progress.data_ranks,
          " rank(s), whose data is partitioned ", progress.data_ranks, " ways; this job has ", ranks(),
          ". Resume with ", progress.data_ranks, " rank(s)");
  steps_done_ = progress.step;
  data_.seek(progress.data_position);
  scaler_.restore(progress.loss_scale, progress.loss_scale_clean_steps, progress.skipped_steps);
  skipped_steps_ = progress.skipped_steps;
}

}  // namespace loom::train
