#include "loom/train/trainer.hpp"

#include <chrono>
#include <filesystem>
#include <cmath>
#include <optional>

#include "loom/comm/agreement.hpp"
#include "loom/core/caching_allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/optim/clip.hpp"

namespace loom::train {

namespace {

std::unique_ptr<optim::Optimizer> make_optimizer(model::ParameterSpace& space, const TrainerOptions& options,
                                                 std::vector<model::ShardRange> ranges) {
  if (options.optimizer != optim::OptimizerKind::adamw) {
    return std::make_unique<optim::SGD>(space, options.sgd, std::move(ranges));
  }
  return std::make_unique<optim::AdamW>(space, options.adamw, std::move(ranges));
}

optim::LossScalerOptions scaler_options(const model::Precision& precision) {
  optim::LossScalerOptions options;
  options.enabled = precision.loss_scaling;
  return options;
}

const TrainerOptions& validated(const TrainerOptions& options, const comm::Communicator* comm) {
  require(options.grad_accumulation >= 1, "trainer: grad_accumulation must be >= 1, got ", options.grad_accumulation);
  require(options.zero >= 0 && options.zero <= 3, "trainer: zero must be 0, 1, 2 or 3, got ", options.zero);
  require(options.zero == 0 || comm != nullptr, "trainer: ZeRO stage ", options.zero, " shards over the ranks of a "
          "communicator; none was given");
  options.schedule.at(0);  // validates the schedule now rather than at the first step
  return options;
}

}  // namespace

Trainer::Trainer(model::Model& model, data::BatchSource& data, const TrainerOptions& options, comm::Communicator* comm)
    : model_(model),
      data_(data),
      options_(validated(options, comm)),
      comm_(comm),
      scaler_(scaler_options(model.precision())) {
  model::ParameterSpace& space = model.parameter_space();
  if (comm_ != nullptr) {
    require(comm_->device() == model.device(), "trainer: the model lives on ", model.device(),
            " but the communicator on ", comm_->device());
  }
  // The synchronisation first: it lays the space out for the ranks the optimizer's state follows.
  if (options_.zero > 0) {
    sync_ = std::make_unique<shard::ZeroEngine>(*comm_, model, options_.zero, options_.reducer, options_.zero_options);
  } else if (comm_ != nullptr) {
    sync_ = std::make_unique<ddp::GradientReducer>(*comm_, space, options_.reducer);
  } else {
    sync_ = std::make_unique<ddp::LocalGradients>(space);
  }
  optimizer_ = make_optimizer(space, options_, sync_->optimizer_ranges());
  if (const Tensor gradients = sync_->optimizer_gradients(); gradients.defined()) {
    optimizer_->read_gradients_from(gradients);
  }
}

Trainer::~Trainer() = default;

ddp::GradientReducer* Trainer::reducer() noexcept { return dynamic_cast<ddp::GradientReducer*>(sync_.get()); }

shard::ZeroEngine* Trainer::zero_engine() noexcept { return dynamic_cast<shard::ZeroEngine*>(sync_.get()); }

void Trainer::run_micro_batches(StepResult& result, double& loss_sum, StreamRef stream) {
  const float micro = static_cast<float>(options_.grad_accumulation);
  // The micro-batches' losses add up on the device and are read back once, after the last.
  const Tensor device_loss_sum = scratch_zeros({1}, DType::f32, model_.device(), stream);
  for (std::int64_t i = 0; i < options_.grad_accumulation; ++i) {
    const data::Batch batch = data_.next();
    const bool last = i + 1 == options_.grad_accumulation;
    {
      const ddp::NoSync scope = sync_->micro_batch(last);
      model_.forward_into(batch.tokens, batch.targets, device_loss_sum, stream);
      model_.backward(scaler_.scale() / micro, stream);
    }
    result.tokens += batch.tokens.numel();
    sync_->after_backward(last, stream);
  }
  loom::synchronize(stream);
  loss_sum = device_loss_sum.to(Device::cpu()).item<float>();
}

StepResult Trainer::step(StreamRef stream) {
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  result.step = steps_done_ + 1;
  double loss_sum = 0;
  sync_->begin_step(stream);
  try {
    run_micro_batches(result, loss_sum, stream);
  } catch (...) {
    sync_->abandon_step();  // nothing stays in flight into the next step
    throw;
  }
  double loss = loss_sum / static_cast<double>(options_.grad_accumulation);
  if (comm_ != nullptr) {
    loss = ddp::mean_across_ranks(*comm_, loss);
    result.tokens *= comm_->size();  // every rank's micro-batches have the same shape
  }
  result.loss = static_cast<float>(loss);
  result.lr = options_.schedule.at(steps_done_);
  // Under ZeRO each rank holds its slice of the reduced gradient: the verdict and the norm are
  // agreed over the ranks. Under DDP every rank holds the whole average and decides alone, the same.
  comm::Communicator* const shards = sync_->shard_group();
  const std::vector<Tensor> grads = optimizer_->gradients();
  const bool finite = scaler_.unscale_and_update(grads, shards, stream);
  result.grad_norm = optim::space_grad_norm(*optimizer_, shards, stream);
  // An inf/NaN gradient never reaches the weights, in any precision (fp16: the scaler backs off).
  result.skipped = !finite || !std::isfinite(result.grad_norm);
  if (result.skipped) ++skipped_steps_;
  if (!result.skipped) {
    optimizer_->step(result.lr, optim::clip_factor(result.grad_norm, options_.max_grad_norm), stream);
    sync_->after_update(stream);
    loom::synchronize(stream);
  }
  ++steps_done_;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

shard::ModelStateBytes Trainer::held_model_state() const {
  const model::ParameterSpace& space = model_.parameter_space();
  shard::ModelStateBytes held;
  held.values = static_cast<std::int64_t>(space.local_values().nbytes());
  const Tensor optimizer_gradients = sync_->optimizer_gradients();
  if (const shard::ZeroEngine* zero = dynamic_cast<const shard::ZeroEngine*>(sync_.get())) {
    held.buffers = zero->pool_bytes() + zero->gather_report().buffer_bytes;
  }
  held.gradients = static_cast<std::int64_t>(space.grads_allocated() ? space.grads().nbytes() : 0) +
                   static_cast<std::int64_t>(optimizer_gradients.defined() ? optimizer_gradients.nbytes() : 0);
  for (const std::string& kind : optimizer_->state_kinds()) {
    const auto bytes = static_cast<std::int64_t>(optimizer_->state(kind).nbytes());
    (kind == "master" ? held.masters : held.moments) += bytes;
  }
  return held;
}

shard::ModelStateBytes Trainer::predicted_model_state() const {
  optim::OptimizerKind kind = optim::OptimizerKind::adamw;
  if (options_.optimizer != optim::OptimizerKind::adamw) {
    kind = options_.sgd.momentum > 0 ? optim::OptimizerKind::sgd_momentum : optim::OptimizerKind::sgd;
  }
  return shard::model_state_bytes(model_, kind, options_.zero, ranks());
}

int Trainer::ranks() const noexcept { return comm_ != nullptr ? comm_->size() : 1; }

io::TrainingProgress Trainer::progress() const {
  io::TrainingProgress p;
  p.step = steps_done_;
  p.batches_consumed = data_.position() * ranks();  // every rank has taken as many
  p.data_seed = options_.data_seed;
  p.loss_scale = scaler_.scale();
  p.loss_scale_clean_steps = scaler_.clean_steps_in_a_row();
  p.skipped_steps = skipped_steps_;
  return p;
}

void Trainer::restore(const io::TrainingProgress& progress) {
  require(progress.data_seed == options_.data_seed, "trainer: the checkpoint's data seed ", progress.data_seed,
          " differs from this run's ", options_.data_seed);
  // Global batch g is batch g / N of rank g % N: after G batches every rank is at G / N.
  require(progress.batches_consumed % ranks() == 0, "trainer: the checkpoint's job consumed ",
          progress.batches_consumed, " batches, which do not divide over this job's ", ranks(), " ranks; resume with "
          "a number of ranks that divides them (and keep ranks x accumulation x batch, the global batch, the same)");
  steps_done_ = progress.step;
  data_.seek(progress.batches_consumed / ranks());
  scaler_.restore(progress.loss_scale, progress.loss_scale_clean_steps, progress.skipped_steps);
  skipped_steps_ = progress.skipped_steps;
}

std::string Trainer::save(const std::string& run_dir) {
  return io::save_checkpoint(run_dir, model_, *optimizer_, progress(), comm_);
}

Trainer::ResumeOutcome Trainer::resume(const std::string& path) {
  ResumeOutcome outcome;
  std::exception_ptr failure;
  try {
    if (std::filesystem::exists(std::filesystem::path(path) / "state.json")) {
      outcome.checkpoint = path;
    } else {
      io::CheckpointSearch search = io::find_resumable_checkpoint(path);
      outcome.skipped = std::move(search.skipped);
      if (search.any && !search.chosen) {
        std::string reasons;
        for (const std::string& s : outcome.skipped) {
          reasons += "\n  ";
          reasons += s;
        }
        fail(ErrorCategory::corrupt_data, "'", path, "' holds checkpoints but none verifies:", reasons);
      }
      if (search.chosen) outcome.checkpoint = *search.chosen;
    }
    if (outcome) restore(io::load_checkpoint(outcome.checkpoint, model_, *optimizer_));
  } catch (...) {
    if (comm_ == nullptr) throw;
    failure = std::current_exception();
  }
  if (comm_ != nullptr) {
    comm::throw_if_any_failed(*comm_, failure, "resuming from a checkpoint");  // every rank must have found the same checkpoint
    ddp::verify_same_value(*comm_, steps_done_,
                           "the step this job resumes at (is the checkpoint directory on a file system every rank sees?)");
  }
  return outcome;
}

}  // namespace loom::train
