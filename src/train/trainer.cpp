#include "loom/train/trainer.hpp"

#include <chrono>
#include <filesystem>
#include <cmath>
#include <optional>
#include <sstream>
#include <utility>

#include "loom/comm/agreement.hpp"
#include "loom/core/caching_allocator.hpp"
#include "loom/core/error.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/model/hook_audit.hpp"
#include "loom/optim/clip.hpp"

namespace loom::train {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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

// A null data group is the world; then the groups are checked against each other (collective over
// the world: every rank reaches the same verdict).
ParallelGroups checked_groups(ParallelGroups g) {
  if (g.data == nullptr) g.data = g.world;
  if (g.world == nullptr) {
    require(g.data == nullptr && g.tensor == nullptr, "trainer: data-parallel or tensor-parallel groups were given "
            "without the world group");
    return g;
  }
  std::exception_ptr invalid;
  try {
    const int tensor = g.tensor != nullptr ? g.tensor->size() : 1;
    require(g.data->size() * tensor == g.world->size(), "trainer: the data-parallel group (", g.data->size(),
            " ranks) times the tensor-parallel group (", tensor, ") must be the world (", g.world->size(), " ranks)");
    require(g.data->device() == g.world->device() && (g.tensor == nullptr || g.tensor->device() == g.world->device()),
            "trainer: the data-parallel group is on ", g.data->device(), (g.tensor != nullptr ? " and the tensor group on " : ""),
            (g.tensor != nullptr ? g.tensor->device().to_string() : std::string()), " but the world on ",
            g.world->device());
  } catch (...) {
    invalid = std::current_exception();
  }
  comm::throw_if_any_failed(*g.world, invalid, "checking the parallel groups");
  // The mesh's order (topo/mesh.hpp): world rank = data rank x tensor + tensor rank. With a
  // tensor group of size 1 the data group is the world, rank for rank.
  const int tensor = g.tensor != nullptr ? g.tensor->size() : 1;
  const int tensor_rank = g.tensor != nullptr ? g.tensor->rank() : 0;
  const std::vector<std::int64_t> apart = comm::all_reduce_values(
      *g.world, {static_cast<std::int64_t>(g.world->rank() != g.data->rank() * tensor + tensor_rank)},
      comm::ReduceOp::max);
  require(apart[0] == 0, "trainer: the groups do not place the ranks as a data x tensor mesh does (world rank = data "
          "rank x ", tensor, " + tensor rank; build them with topo::DeviceMesh)");
  return g;
}

}  // namespace

Trainer::Trainer(model::Model& model, data::BatchSource& data, const TrainerOptions& options, comm::Communicator* comm)
    : Trainer(model, data, options, ParallelGroups{comm, comm, nullptr}) {}

Trainer::Trainer(model::Model& model, data::BatchSource& data, const TrainerOptions& options, ParallelGroups groups)
    : model_(model),
      data_(data),
      options_(validated(options, groups.data != nullptr ? groups.data : groups.world)),
      groups_(checked_groups(groups)),
      comm_(groups_.data),
      scaler_(scaler_options(model.precision())),
      timer_(model.device()),
      stragglers_(options_.stragglers, groups_.world) {
  const int tensor_ranks = groups_.tensor != nullptr ? groups_.tensor->size() : 1;
  require(model.tensor_ranks() == tensor_ranks, "trainer: the model is split over a tensor group of ",
          model.tensor_ranks(), " rank(s) but the trainer was given one of ", tensor_ranks,
          " (pass the model's tensor group as ParallelGroups::tensor)");
  model::ParameterSpace& space = model.parameter_space();
  const bool built_sharded = space.value_mode() == model::ValueMode::sharded;
  if (comm_ != nullptr) {
    require(comm_->device() == model.device(), "trainer: the model lives on ", model.device(),
            " but the communicator on ", comm_->device());
  }
  // Values nobody set are zeros, which train poorly or not at all, silently: refused by name. Under
  // data parallelism rank 0's values are the ones every rank gets, so its verdict is everyone's.
  // (Agreed over the world: under tensor parallelism every data group's rank 0 speaks for its group.)
  bool unset = space.value_origin().empty();
  if (comm_ != nullptr) {
    unset = comm::all_reduce_values(*groups_.world, {static_cast<std::int64_t>(comm_->rank() == 0 && unset)},
                                    comm::ReduceOp::max)[0] != 0;
  }
  require(!unset, "trainer: the model's parameter values were never set (", comm_ != nullptr ? "on rank 0, " : "",
          "ParameterSpace::value_origin() is empty), so every weight is 0 and the model would train poorly or not at "
          "all. Call parameter_space().initialize(seed) once the space is built (each parameter's model::Init: "
          "nn::Linear weights N(0, 0.02) unless set otherwise), or, for values you set yourself, record where they "
          "came from with parameter_space().set_value_origin(\"...\")");
  timer_.set_enabled(options_.phase_timers);
  if (!options_.trace.dir.empty()) {
    start_trace();
    timer_.mirror_to(trace_.get());
  }
  // Every call of the data group is timed (the step's bandwidth), and traced while tracing.
  if (comm_ != nullptr) {
    observed_data_ = telemetry::observed_communicator(*comm_, trace_, meter_);
    comm_ = observed_data_.get();
  }
  // The synchronisation first: it lays the space out for the ranks the optimizer's state follows.
  if (options_.zero > 0) {
    sync_ = std::make_unique<shard::ZeroEngine>(*comm_, model, options_.zero, options_.reducer, options_.zero_options);
  } else if (comm_ != nullptr) {
    sync_ = std::make_unique<ddp::GradientReducer>(*comm_, space, options_.reducer);
  } else {
    require(space.value_mode() == model::ValueMode::full, "trainer: the model's values are sharded (ZeRO-3's layout) "
            "but no communicator was given to gather them; build it with shard::space_layout(0, nullptr)");
    space.allocate_grads();  // a model built in ZeRO-2's layout has none yet
    sync_ = std::make_unique<ddp::LocalGradients>(space);
  }
  std::exception_ptr failure;
  try {
    optimizer_ = make_optimizer(space, options_, sync_->optimizer_ranges());
    if (const Tensor gradients = sync_->optimizer_gradients(); gradients.defined()) {
      optimizer_->read_gradients_from(gradients);
    }
  } catch (...) {
    if (comm_ == nullptr) throw;
    failure = std::current_exception();
  }
  // One rank out of memory for its optimizer state must not leave the others waiting in step 1
  // (agreed over the world: other data groups would wait in their tensor groups' calls).
  if (comm_ == nullptr) return;
  try {
    comm::throw_if_any_failed(*groups_.world, failure, "building the optimizer");
  } catch (...) {
    // Every rank is here: give a ZeRO-3 model that came whole its values back before the engine
    // goes (one built sharded stays so: it may not fit whole).
    if (shard::ZeroEngine* zero = zero_engine(); zero != nullptr && zero->stage() == 3 && !built_sharded) {
      try {
        zero->unshard_values();
      } catch (...) {  // the first error is the one to report
      }
    }
    throw;
  }
}

namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

void Trainer::fail_job(const std::exception_ptr& error, const char* where) noexcept {
  if (comm_ == nullptr) return;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::aborted) return;  // another rank's failure: it told everyone
  } catch (...) {
  }
  try {
    const std::string reason =
        loom::detail::concat("failed in ", where, " of step ", steps_done_ + 1, ": ", message_of(error));
    comm_->abort(reason);
    if (groups_.world != groups_.data) groups_.world->abort(reason);  // ranks outside this data group, too
    // The tensor group is a communicator of its own: its peers may wait in a layer's all-reduce.
    if (groups_.tensor != nullptr && groups_.tensor->size() > 1) groups_.tensor->abort(reason);
  } catch (...) {  // the communicator is broken already: its peers fail anyway
  }
}

Trainer::~Trainer() = default;

// The recorder, and the units' forward and backward as spans through the model's unit hooks (each
// unit's span opens before it and closes after it).
void Trainer::start_trace() {
  trace_ = std::make_shared<telemetry::TraceRecorder>(options_.trace, model_.device(),
                                                      groups_.world != nullptr ? groups_.world->rank() : 0);
  const auto open = [this](const char* pass) {
    return [this, pass](std::size_t unit, StreamRef stream) {
      if (!trace_->recording()) return;
      unit_spans_.emplace_back(unit, trace_->begin(std::string(pass) + " unit " + std::to_string(unit), "unit", stream));
    };
  };
  const auto close = [this](std::size_t unit, StreamRef stream) {
    if (!trace_->recording()) return;
    for (auto it = unit_spans_.rbegin(); it != unit_spans_.rend(); ++it) {
      if (it->first != unit) continue;
      trace_->end(it->second, stream);
      unit_spans_.erase(std::next(it).base());
      return;
    }
  };
  model::UnitHooks hooks;
  hooks.before_forward = open("forward");
  hooks.after_forward = close;
  hooks.before_backward = open("backward");
  hooks.after_backward = close;
  trace_hooks_.model = &model_;
  trace_hooks_.id = model_.add_unit_hooks(std::move(hooks));
}

ddp::GradientReducer* Trainer::reducer() noexcept { return dynamic_cast<ddp::GradientReducer*>(sync_.get()); }

shard::ZeroEngine* Trainer::zero_engine() noexcept { return dynamic_cast<shard::ZeroEngine*>(sync_.get()); }

void Trainer::run_micro_batches(StepResult& result, double& loss_sum, StreamRef stream) {
  const float micro = static_cast<float>(options_.grad_accumulation);
  // The micro-batches' losses add up on the device and are read back once, after the last.
  const Tensor device_loss_sum = scratch_zeros({1}, DType::f32, model_.device(), stream);
  using telemetry::Phase;
  for (std::int64_t i = 0; i < options_.grad_accumulation; ++i) {
    const auto waited = std::chrono::steady_clock::now();
    const data::Batch batch = data_.next();
    timer_.add_host_seconds(Phase::data, seconds_since(waited));
    if (trace_ && trace_->recording()) {
      trace_->host_span("data", "data", telemetry::TraceTrack::host, waited, std::chrono::steady_clock::now());
    }
    const bool last = i + 1 == options_.grad_accumulation;
    {
      const ddp::NoSync scope = sync_->micro_batch(last);
      {
        const telemetry::PhaseScope phase(timer_, Phase::forward, stream);
        model_.forward_into(batch.inputs, batch.targets, device_loss_sum, stream);
      }
      const telemetry::PhaseScope phase(timer_, Phase::backward, stream);
      model_.backward(scaler_.scale() / micro, stream);
    }
    result.tokens += batch.inputs.numel();
    // What backward did not hide: the wait for this micro-batch's reductions.
    const telemetry::PhaseScope phase(timer_, Phase::communication, stream);
    sync_->after_backward(last, stream);
  }
  loom::synchronize(stream);
  loss_sum = device_loss_sum.to(Device::cpu()).item<float>();
}

std::pair<MemoryCategory, std::int64_t> largest_category(const StepResult& result) {
  std::size_t largest = 0;
  for (std::size_t c = 1; c < memory_category_count; ++c) {
    if (result.memory_peak[c] > result.memory_peak[largest]) largest = c;
  }
  return {static_cast<MemoryCategory>(largest), result.memory_peak[largest]};
}

StepResult Trainer::step(StreamRef stream) {
  const auto start = std::chrono::steady_clock::now();
  const bool host_memory = model_.device().is_cpu();
  StepResult result;
  result.step = steps_done_ + 1;
  double loss_sum = 0;
  using telemetry::Phase;
  timer_.start_step();
  if (trace_) trace_->begin_step(result.step, stream);
  timer_.add_host_seconds(Phase::checkpoint, std::exchange(checkpoint_seconds_, 0.0));
  // A rank whose forward, backward or update fails cannot meet its peers' next collectives: it
  // aborts the communicator with its error, so they stop at once with that error instead of
  // waiting out the timeout. (A failure the collectives themselves report is every rank's already.)
  try {
    // The first step also checks that the model calls its unit hooks in pairs around every unit
    // (model/hook_audit.hpp): a model that forgets one trains in one process and under DDP, and
    // would fail obscurely under ZeRO; here it is named, at any stage. Units a model may leave
    // out of a step (unused parameters reduced as zeros) need only pair their hooks.
    std::optional<model::HookAudit> audit;
    if (steps_done_ == 0 && !audited_) audit.emplace(model_);
    sync_->begin_step(stream);
    run_micro_batches(result, loss_sum, stream);
    if (audit) {
      audited_ = true;
      audit->check(options_.reducer.unused_parameters == ddp::UnusedParameters::error);
    }
  } catch (...) {
    fail_job(std::current_exception(), "forward or backward");
    sync_->abandon_step();  // nothing stays in flight into the next step
    throw;
  }
  double loss = loss_sum / static_cast<double>(options_.grad_accumulation);
  if (comm_ != nullptr) {
    const telemetry::PhaseScope phase(timer_, Phase::communication, stream);
    loss = ddp::mean_across_ranks(*comm_, loss);
    result.tokens *= comm_->size();  // every rank's micro-batches have the same shape
  }
  result.loss = static_cast<float>(loss);
  result.lr = options_.schedule.at(steps_done_);
  // Under ZeRO each rank holds its slice of the reduced gradient: the verdict and the norm are
  // agreed over the ranks. Under DDP every rank holds the whole average and decides alone, the same.
  timer_.begin(Phase::optimizer, stream);
  comm::Communicator* const shards = sync_->shard_group();
  const std::vector<Tensor> grads = optimizer_->gradients();
  // Under tensor parallelism each rank of the tensor group holds other blocks: both are agreed over it too.
  const bool finite = scaler_.unscale_and_update(grads, shards, groups_.tensor, stream);
  result.grad_norm = optim::space_grad_norm(*optimizer_, shards, groups_.tensor, stream);
  // An inf/NaN gradient never reaches the weights, in any precision (fp16: the scaler backs off).
  result.skipped = !finite || !std::isfinite(result.grad_norm);
  if (result.skipped) ++skipped_steps_;
  if (!result.skipped) {
    try {
      optimizer_->step(result.lr, optim::clip_factor(result.grad_norm, options_.max_grad_norm), stream);
      timer_.end(Phase::optimizer, stream);
      const telemetry::PhaseScope phase(timer_, Phase::communication, stream);
      sync_->after_update(stream);
    } catch (...) {
      fail_job(std::current_exception(), "the optimizer step");
      throw;
    }
  } else {
    timer_.end(Phase::optimizer, stream);
  }
  loom::synchronize(stream);  // the step's one wait for the device; the phases' events are read after it
  ++steps_done_;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.phases = timer_.read();
  if (trace_) trace_->end_step();
  result.stragglers = stragglers_.add(result.step, result.seconds, result.phases);
  result.communication = meter_->take(comm_ != nullptr ? comm_->size() : 1);
  if (host_memory) {
    const CpuMemoryStats memory = cpu_memory_stats();
    result.memory_live = memory.live_by_category;
    result.memory_peak = memory.peak_by_category;
    result.memory_peak_total = memory.peak_bytes;
  }
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

shard::ModelStateBytes predict_model_state(const model::Model& model, const TrainerOptions& options, int ranks) {
  optim::OptimizerKind kind = optim::OptimizerKind::adamw;
  if (options.optimizer != optim::OptimizerKind::adamw) {
    kind = options.sgd.momentum > 0 ? optim::OptimizerKind::sgd_momentum : optim::OptimizerKind::sgd;
  }
  const bool keep = options.zero_options.keep_gathered_for_backward || options.zero_options.keep_gathered_across_micro_batches;
  return shard::model_state_bytes(model, kind, options.zero, ranks, keep);
}

shard::ModelStateBytes Trainer::predicted_model_state() const { return predict_model_state(model_, options_, ranks()); }

int Trainer::ranks() const noexcept { return comm_ != nullptr ? comm_->size() : 1; }

io::TrainingProgress Trainer::progress() const {
  io::TrainingProgress p;
  p.step = steps_done_;
  p.batches_consumed = data_.consumed_at(data_.position(), ranks());
  p.data_seed = options_.data_seed;
  p.loss_scale = scaler_.scale();
  p.loss_scale_clean_steps = scaler_.clean_steps_in_a_row();
  p.skipped_steps = skipped_steps_;
  return p;
}

void Trainer::restore(const io::TrainingProgress& progress) {
  require(progress.data_seed == options_.data_seed, "trainer: the checkpoint's data seed ", progress.data_seed,
          " differs from this run's ", options_.data_seed);
  const std::int64_t position = data_.position_at(progress.batches_consumed, ranks());
  steps_done_ = progress.step;
  data_.seek(position);
  scaler_.restore(progress.loss_scale, progress.loss_scale_clean_steps, progress.skipped_steps);
  skipped_steps_ = progress.skipped_steps;
}

io::CheckpointWriter& Trainer::checkpoint_writer() {
  // Built at the first save, which every rank makes at the same step: building it is collective
  // over the world (under tensor parallelism each rank of a data group writes other blocks).
  if (!writer_) {
    writer_ = std::make_unique<io::CheckpointWriter>(model_, *optimizer_, groups_.world, options_.checkpoint);
  }
  return *writer_;
}

io::SaveReport Trainer::save(const std::string& run_dir) {
  const auto start = std::chrono::steady_clock::now();
  io::SaveReport report = checkpoint_writer().save(run_dir, progress());
  note_save("checkpoint save", start);
  return report;
}

void Trainer::save_async(const std::string& run_dir) {
  const auto start = std::chrono::steady_clock::now();
  checkpoint_writer().save_async(run_dir, progress());
  note_save("checkpoint copy (asynchronous save)", start);  // the copy to host, the wait for the previous save
}

void Trainer::note_save(const char* what, std::chrono::steady_clock::time_point start) {
  const auto end = std::chrono::steady_clock::now();
  checkpoint_seconds_ += std::chrono::duration<double>(end - start).count();
  if (trace_ && trace_->covers(steps_done_)) trace_->host_span(what, "checkpoint", telemetry::TraceTrack::host, start, end);
}

void Trainer::wait_for_save() {
  if (writer_) writer_->wait();
}

std::vector<io::SaveReport> Trainer::finished_saves() {
  return writer_ ? writer_->finished() : std::vector<io::SaveReport>{};
}

Trainer::ResumeOutcome Trainer::resume(const std::string& path) {
  comm::Communicator* const world = groups_.world;  // every rank reads its own part
  ResumeOutcome outcome;
  std::exception_ptr failure;
  try {
    // A save in flight is committed first: the search below reads what its commit renames, and
    // its values are about to be replaced.
    if (writer_) writer_->wait();
    bool checkpoint_dir = std::filesystem::exists(std::filesystem::path(path) / "state.json");
    // Rank 0's view decides for every rank, which then all take the same (collective) path.
    if (world != nullptr) checkpoint_dir = comm::broadcast_values(*world, {checkpoint_dir ? 1 : 0}, 0).at(0) != 0;
    if (checkpoint_dir) {
      outcome.checkpoint = path;
    } else {
      // The ranks verify the candidates together, each reading its share of the files.
      io::CheckpointSearch search =
          world != nullptr ? io::find_resumable_checkpoint(path, *world) : io::find_resumable_checkpoint(path);
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
    if (outcome) {
      restore(io::load_checkpoint(outcome.checkpoint, model_, *optimizer_));
      sync_->values_changed();  // no unit gathered before the load is used after it
    }
  } catch (...) {
    if (world == nullptr) throw;
    failure = std::current_exception();
  }
  if (world != nullptr) {
    comm::throw_if_any_failed(*world, failure, "resuming from a checkpoint");  // every rank must have found the same checkpoint
    ddp::verify_same_value(*world, steps_done_,
                           "the step this job resumes at (is the checkpoint directory on a file system every rank sees?)");
  }
  return outcome;
}

std::string describe(const TrainerOptions& o) {
  std::ostringstream out;
  if (o.optimizer == optim::OptimizerKind::adamw) {
    out << "AdamW (beta1 " << o.adamw.beta1 << ", beta2 " << o.adamw.beta2 << ", eps " << o.adamw.eps
        << ", weight decay " << o.adamw.weight_decay << ")";
  } else {
    out << "SGD (momentum " << o.sgd.momentum << ", dampening " << o.sgd.dampening << ", weight decay "
        << o.sgd.weight_decay << (o.sgd.nesterov ? ", Nesterov" : "") << ")";
  }
  out << ", lr " << o.schedule.max_lr << " -> " << o.schedule.min_lr << " cosine by step " << o.schedule.total
      << " after " << o.schedule.warmup << " warmup steps, ";
  if (o.max_grad_norm > 0) out << "clipping at global norm " << o.max_grad_norm;
  else out << "no clipping";
  out << ", " << o.grad_accumulation << " micro-batch(es) per step, ZeRO stage " << o.zero;
  if (o.stragglers.every > 0) {
    out << ", stragglers compared every " << o.stragglers.every << " steps (margin " << 100 * o.stragglers.margin << "%)";
  } else {
    out << ", no straggler check";
  }
  return out.str();
}

telemetry::StepMetrics step_metrics(const StepResult& result, const Trainer& trainer, int rank) {
  telemetry::StepMetrics m;
  m.step = result.step;
  m.rank = rank;
  m.loss = result.loss;
  m.lr = result.lr;
  m.grad_norm = result.grad_norm;
  m.skipped = result.skipped;
  m.skipped_total = trainer.skipped_steps();
  m.loss_scale = trainer.loss_scaler().scale();
  m.seconds = result.seconds;
  m.tokens_per_second = result.seconds > 0 ? static_cast<double>(result.tokens) / result.seconds : 0.0;
  m.phases = result.phases;
  m.stragglers = result.stragglers;
  m.communication = result.communication;
  if (result.memory_peak_total > 0) {  // counted (host memory)
    m.memory_live = result.memory_live;
    m.memory_peak = result.memory_peak;
    m.memory_peak_total = result.memory_peak_total;
  }
  return m;
}

}  // namespace loom::train
