// One optimizer step of training any model::Model, the way mixed-precision trainers do it:
// gradient accumulation over micro-batches (the loss of each divided by their number), dynamic loss
// scaling for fp16 (unscale + inf/NaN check in one pass; a bad step is skipped and counted),
// clipping by global norm (folded into the optimizer's gradient scale), the learning rate from a
// cosine schedule, and AdamW or SGD with momentum. Everything a checkpoint needs is in
// progress()/restore().
//
// With a communicator it trains data-parallel over its ranks, through one ddp::GradientSync:
//   zero 0 (DDP): a GradientReducer averages the gradients while backward runs (every micro-batch
//                 but the last inside no_sync()); every rank updates the whole model.
//   zero 1, 2:    a shard::ZeroEngine reduce-scatters them unit by unit; each rank updates its
//                 slice with optimizer state for that slice only, and the values are all-gathered.
//   zero 3:       the values are sharded too, gathered unit by unit as forward and backward use
//                 them (shard/zero.hpp).
// Either way the loss scaler's verdict and the clipping norm are the whole gradient's (computed
// over the shards with an all-reduce under ZeRO), so every rank takes the same decisions, and the
// step's loss and token count are the job's.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/data/batch_source.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/ddp/gradient_sync.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/checkpoint_writer.hpp"
#include "loom/model/model.hpp"
#include "loom/core/memory_category.hpp"
#include "loom/optim/adamw.hpp"
#include "loom/optim/loss_scaler.hpp"
#include "loom/optim/schedule.hpp"
#include "loom/optim/sgd.hpp"
#include "loom/shard/memory.hpp"
#include "loom/shard/zero.hpp"
#include "loom/telemetry/comm_meter.hpp"
#include "loom/telemetry/metrics.hpp"
#include "loom/telemetry/phases.hpp"
#include "loom/telemetry/straggler.hpp"
#include "loom/telemetry/trace.hpp"

namespace loom::train {

// The defaults are GPT-2's (as in nanoGPT and llm.c): clipping at a global norm of 1.0, AdamW with
// beta1 0.9, beta2 0.95, eps 1e-8 and decoupled weight decay 0.1 (on the parameters that declare
// it: matrices, not biases or norms), a learning rate of 3e-4 decaying to 3e-5. The schedule's
// length, schedule.total, has no default: set it to the run's optimizer steps (a Trainer refuses
// a schedule without one).
struct TrainerOptions {
  std::int64_t grad_accumulation = 1;  // micro-batches per optimizer step
  float max_grad_norm = 1.0f;          // <= 0: no clipping
  optim::CosineSchedule schedule{};    // max_lr 3e-4, min_lr 3e-5, warmup 0, total: required
  // adamw, or SGD (sgd and sgd_momentum both mean optim::SGD with sgd.momentum).
  using OptimizerKind = optim::OptimizerKind;
  OptimizerKind optimizer = OptimizerKind::adamw;
  optim::AdamWOptions adamw{};
  optim::SgdOptions sgd{};
  std::uint64_t data_seed = 0;         // recorded in checkpoints
  int zero = 0;                        // 0 (DDP), 1, 2 or 3; needs a communicator when > 0
  ddp::ReducerOptions reducer{};       // the data-parallel reducer's options (ZeRO: see ZeroEngine)
  shard::ZeroOptions zero_options{};   // ZeRO-2/3's reduction dtype, ZeRO-3's keep-gathered options
  io::CheckpointWriterOptions checkpoint{};  // the commit deadline and write rate of save()/save_async()
  telemetry::StragglerOptions stragglers{};  // every 50 steps the world's ranks compare their phases
  telemetry::TraceOptions trace{};           // a timeline of a step range (trace.dir empty: none)
  bool phase_timers = true;                  // StepResult::phases (off only to measure their cost)
};

// The groups of ranks a training job spans, and what each is used for:
//   world:  every rank of the job; saving (every rank writes its own part) and the failure notice.
//   data:   the ranks that split the batch and hold the same model (or its ZeRO shards): the
//           gradient synchronisation, the loss and token counts, the data position, the norm and
//           the loss scaler's agreement.
//   tensor: the ranks that split each layer (tensor parallelism: the model's layers talk over it;
//           the norm and the loss scaler's verdict are agreed over it too, and a failure aborts it).
// data x tensor must be world: with tensor of size 1, data is the world itself. A null world is
// one process (data and tensor must be null too); a null data group is the world; a null tensor
// group has size 1.
struct ParallelGroups {
  comm::Communicator* world = nullptr;
  comm::Communicator* data = nullptr;
  comm::Communicator* tensor = nullptr;
};

// The training settings in one line, every default included, as the examples print them at start:
// "AdamW (beta1 0.9, beta2 0.95, eps 1e-08, weight decay 0.1), lr 0.0003 -> 3e-05 cosine by step
// 1000 after 0 warmup steps, clipping at global norm 1, 1 micro-batch(es) per step, ZeRO stage 0".
std::string describe(const TrainerOptions& options);

struct StepResult {
  std::int64_t step = 0;   // 1-based number of this step
  float loss = 0;          // mean over the micro-batches (and the ranks, data-parallel)
  float grad_norm = 0;     // before clipping (NaN/inf on a skipped step)
  float lr = 0;
  bool skipped = false;    // a non-finite gradient (fp16 overflow, or inf/NaN anywhere): no update
  std::int64_t tokens = 0; // elements of the inputs of every micro-batch, on every rank
  double seconds = 0;      // wall time of the step, synchronized
  // Host memory by loom::MemoryCategory at the end of the step (the CPU allocator's counts: the
  // whole process's, so in-process ranks count each other too; zeros for a model on a GPU, whose
  // default allocator does not count yet): live bytes, and each category's high-water mark since
  // the process started or last called reset_cpu_memory_peak() (before each step: that step's).
  CategoryBytes memory_live{};
  CategoryBytes memory_peak{};
  std::int64_t memory_peak_total = 0;  // the most bytes live at once over the same span
  // This rank's seconds per phase (loom/telemetry/phases.hpp), always measured: the wait for data,
  // forward, backward, the communication left exposed after backward (the reductions' wait, the
  // loss's mean, ZeRO's gather after the update), the optimizer (with the loss scaler and the
  // norm), and the blocking time of the saves made since the previous step. All but checkpoint lie
  // inside `seconds` (the saves ran between the steps).
  telemetry::PhaseSeconds phases{};
  // At the end of each straggler window (every TrainerOptions::stragglers.every steps, a collective
  // over the world): every rank's averages over the window and the ranks named as slow.
  std::optional<telemetry::StragglerWindow> stragglers;
  // The data group's calls in this step by collective: calls, bytes, time in flight, the bus
  // bandwidth achieved (loom/telemetry/comm_meter.hpp; the caller adds the cost model's prediction).
  telemetry::CommTotals communication;
};
// The category with the largest peak in a step, and those bytes.
std::pair<MemoryCategory, std::int64_t> largest_category(const StepResult& result);

// What shard::model_state_bytes predicts for `model` trained with these options over `ranks`
// data-parallel ranks (the optimizer's state by its kind: SGD with momentum keeps a moment; ZeRO-3's
// gathered units by keep_gathered), before a Trainer exists (train_gpt --batch auto).
shard::ModelStateBytes predict_model_state(const model::Model& model, const TrainerOptions& options, int ranks);

class Trainer {
 public:
  // comm: the data-parallel group (null: one process). Building the trainer builds the reducer or
  // the ZeRO engine (every rank gets rank 0's weights) and then the optimizer, so it is a
  // collective. The model, data and comm must outlive the trainer.
  Trainer(model::Model& model, data::BatchSource& data, const TrainerOptions& options,
          comm::Communicator* comm = nullptr);
  // The same with the job's groups (see ParallelGroups); groups that do not fit together (sizes,
  // devices, ranks in another order) are an invalid_argument Error on every rank, naming them.
  Trainer(model::Model& model, data::BatchSource& data, const TrainerOptions& options, ParallelGroups groups);
  ~Trainer();

  // One optimizer step. Data-parallel: when this rank's forward, backward or optimizer step
  // throws, it aborts the communicator with its error before rethrowing, so every other rank's
  // step fails within moments with an Error naming this rank and its message (MPI and in-process
  // communicators; NCCL has no channel to tell its peers, which fail at their timeout).
  StepResult step(StreamRef stream = {});

  std::int64_t steps_done() const noexcept { return steps_done_; }
  std::int64_t skipped_steps() const noexcept { return skipped_steps_; }
  io::TrainingProgress progress() const;
  // Continues a run from a loaded checkpoint's progress (the model and optimizer state are
  // restored by io::load_checkpoint): step counter, data position, loss scaler. A checkpoint of
  // any number of ranks resumes here as long as its consumed batches divide over this job's ranks.
  void restore(const io::TrainingProgress& progress);
  // Checkpoints of this step in run_dir (loom-checkpoint-2, io/checkpoint_writer.hpp), collective
  // over the world: every rank writes its own part (under tensor parallelism its own blocks). save() returns once the checkpoint is
  // committed. save_async() returns once this rank's part is copied to host memory, and a
  // background thread writes and commits it while the next steps run; a new save waits for the
  // one in flight, and so do resume() and the destructor. wait_for_save() blocks until none is in
  // flight and throws the error of one that failed (on every rank alike); finished_saves() hands
  // out the reports of background saves committed since the last call, without blocking. The
  // first save builds the writer (options.checkpoint).
  io::SaveReport save(const std::string& run_dir);
  void save_async(const std::string& run_dir);
  void wait_for_save();
  std::vector<io::SaveReport> finished_saves();
  // Loads a checkpoint directory, or the newest checkpoint of a run directory that verifies
  // (io::find_resumable_checkpoint: `latest` is not trusted blindly). A run directory without any
  // checkpoint resumes nothing (the outcome is false); one whose checkpoints all fail to verify
  // is an Error listing why. Collective when data-parallel: every rank must find the same step.
  struct ResumeOutcome {
    std::string checkpoint;            // the directory loaded; empty: none, starting from scratch
    std::vector<std::string> skipped;  // why newer candidates were passed over
    explicit operator bool() const noexcept { return !checkpoint.empty(); }
  };
  ResumeOutcome resume(const std::string& path);

  // The model state this rank holds (values, gradients, masters, moments, and ZeRO's unit
  // buffers: the gradient pool and ZeRO-3's gathered values), and what shard::model_state_bytes
  // predicts for this model, precision, optimizer, stage and ranks.
  shard::ModelStateBytes held_model_state() const;
  shard::ModelStateBytes predicted_model_state() const;

  // The data-parallel ranks (1 without a communicator).
  int ranks() const noexcept;
  int zero_stage() const noexcept { return options_.zero; }
  model::Model& model() noexcept { return model_; }
  optim::Optimizer& optimizer() noexcept { return *optimizer_; }
  const optim::DynamicLossScaler& loss_scaler() const noexcept { return scaler_; }
  // How the gradients are synchronised (DDP, ZeRO, or one process alone): its stats() describe the
  // overlap of the last step's reductions.
  ddp::GradientSync& gradient_sync() noexcept { return *sync_; }
  const ddp::GradientSync& gradient_sync() const noexcept { return *sync_; }
  // The same, when it is DDP's reducer or a ZeRO engine; null otherwise.
  ddp::GradientReducer* reducer() noexcept;
  shard::ZeroEngine* zero_engine() noexcept;
  // The data-parallel group (null: one process), and all the groups.
  comm::Communicator* communicator() const noexcept { return comm_; }
  const ParallelGroups& groups() const noexcept { return groups_; }

 private:
  void run_micro_batches(StepResult& result, double& loss_sum, StreamRef stream);
  void start_trace();
  void note_save(const char* what, std::chrono::steady_clock::time_point start);
  // Aborts the communicator with this rank's error (see step()).
  void fail_job(const std::exception_ptr& error, const char* where) noexcept;
  io::CheckpointWriter& checkpoint_writer();

  model::Model& model_;
  data::BatchSource& data_;
  TrainerOptions options_;
  ParallelGroups groups_;
  comm::Communicator* comm_;  // groups_.data, seen through observed_data_
  // Before sync_: the reducer's calls complete into the recorder until sync_ is gone.
  // Shared with the observed communicator's completions, which may outlive a step (or the Trainer).
  std::shared_ptr<telemetry::TraceRecorder> trace_;
  std::shared_ptr<telemetry::CommMeter> meter_ = std::make_shared<telemetry::CommMeter>();
  std::unique_ptr<comm::Communicator> observed_data_;  // groups_.data seen through meter_ (and trace_)
  // The trace's unit hooks, removed when this goes (also when the constructor throws after adding them).
  struct HooksRegistration {
    model::Model* model = nullptr;
    std::optional<model::Model::HooksId> id;
    HooksRegistration() = default;
    HooksRegistration(const HooksRegistration&) = delete;
    HooksRegistration& operator=(const HooksRegistration&) = delete;
    ~HooksRegistration() {
      if (id) model->remove_unit_hooks(*id);
    }
  } trace_hooks_;
  std::vector<std::pair<std::size_t, std::size_t>> unit_spans_;  // (unit, span) open in the trace
  std::unique_ptr<ddp::GradientSync> sync_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::DynamicLossScaler scaler_;
  std::int64_t steps_done_ = 0, skipped_steps_ = 0;
  bool audited_ = false;  // the first step checked the model's unit hooks
  telemetry::PhaseTimer timer_;
  telemetry::StragglerDetector stragglers_;
  double checkpoint_seconds_ = 0;  // saves' blocking time since the last step, for its phases
  std::unique_ptr<io::CheckpointWriter> writer_;  // last: a save in flight ends before the rest goes
};

// A step's numbers for the metrics files (loom/telemetry/metrics.hpp), as `rank` saw them: the
// result's, the trainer's loss scale and skip count, memory where the allocator counts it (the
// CPU). The MFU is left to the caller, who knows the hardware's peak.
telemetry::StepMetrics step_metrics(const StepResult& result, const Trainer& trainer, int rank);

}  // namespace loom::train
