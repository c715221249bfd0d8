// ZeRO stages 1, 2 and 3 over the data-parallel group (Rajbhandari et al., "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models"). Rank r owns slice r of every unit of
// the model's parameter space: its optimizer (built over ranges()) keeps fp32 masters and moments
// for that slice only, updates it, and gather_values() all-gathers the updated values unit by unit.
//
//   stage 1: the full gradient buffer stays; as backward finishes a unit, its gradients are
//            reduce-scattered (averaged) in place, overlapped with the rest of backward, leaving
//            the average of this rank's slice in the slice. Gradient accumulation as in DDP:
//            every micro-batch but the last inside no_sync().
//   stage 2: only this rank's slice of the reduced gradient persists (shard_gradients()).
//            A unit's full gradient buffer exists only while its backward and reduce-scatter are
//            in flight: the model's before_backward hook takes one from a small pool, and the
//            reduction's finish adds the slice into the shard and returns the buffer. Every
//            micro-batch is reduced (synchronize() after each) and added into the fp32 shard.
//   stage 3: the values are sharded too (the space holds only this rank's slices). Before a
//            unit's forward its values are all-gathered into a pooled buffer and released after
//            it; before its backward they are gathered again; the gradients go as at stage 2.
//            While one unit computes, the next unit's gather is already in flight (forward in
//            unit order, backward in reverse), so at most two unit buffers are alive besides the
//            model's root units (model::Model::root_units(), gathered for the whole forward
//            and backward). The last unit of forward stays gathered for backward, which starts
//            with it. Forward-only use (evaluation, generation) works the same way and is
//            collective: every rank must run it. After the optimizer nothing is gathered: the
//            next use gathers the updated slices.
//
// Build the model in space_layout(stage, &comm) (below) so that it never holds more than its share.
//
//   loom::shard::ZeroEngine zero(comm, model, 2);              // before the optimizer
//   loom::optim::AdamW adamw(model.parameter_space(), {}, zero.ranges());
//   zero.attach(adamw);
// It is the ZeRO implementation of ddp::GradientSync, which is how Trainer uses it; by hand:
//   for (...) {
//     zero.begin_step();
//     for (each micro-batch) { model.forward(...); model.backward(...); zero.synchronize(); }
//     ... global norm and inf check over adamw.gradients() with the communicator ...
//     adamw.step(lr, scale);
//     zero.gather_values();
//   }
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/ddp/bucket_scheduler.hpp"
#include "loom/ddp/gradient_reducer.hpp"
#include "loom/ddp/gradient_sync.hpp"
#include "loom/model/model.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::shard {

namespace detail {
class GatheredUnits;
}

struct ZeroOptions {
  // Stage 3: a unit's values stay gathered from its forward to its backward (more memory, no
  // second gather; FSDP's reshard_after_forward = false).
  bool keep_gathered_for_backward = false;
  // Stage 3: they stay gathered across the forwards and backwards of all the micro-batches of one
  // step (released by the last backward): one gather per unit per step.
  bool keep_gathered_across_micro_batches = false;
  // Stages 2 and 3: the reduce-scatter's dtype. bf16 halves the traffic; each rank still adds
  // its reduced slice into the fp32 gradient shard.
  DType reduction = DType::f32;
};

// Stage 3's value gathers since the last reset (prefetch effectiveness) and its buffers.
struct GatherReport {
  std::int64_t gathers = 0;
  std::int64_t prefetched = 0;  // issued before their unit needed them
  std::int64_t ready = 0;       // prefetched and already complete when their unit started
  std::size_t buffers = 0;      // value buffers allocated (the pool)
  std::size_t peak_live = 0;    // most units gathered at once
  std::int64_t buffer_bytes = 0;
};

class ZeroEngine final : public ddp::GradientSync, private ddp::BucketCollective {
 public:
  // stage: 1, 2 or 3. reducer_options: unused_parameters and broadcast_parameters are used; the
  // bucket sizes do not apply (units are the buckets) and a communication hook is refused. The
  // model and comm must outlive the engine. Stage 3 leaves the model's values sharded when the
  // engine is destroyed unless unshard_values() gave them back (that needs every rank).
  ZeroEngine(comm::Communicator& comm, model::Model& model, int stage, ddp::ReducerOptions reducer_options = {},
             ZeroOptions options = {});
  ~ZeroEngine() override;
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  int stage() const noexcept { return stage_; }
  int zero_stage() const noexcept override { return stage_; }
  // This rank's part of the space: what its optimizer updates.
  std::vector<model::ShardRange> ranges() const;
  // Points the optimizer (built over ranges()) at the gradients it must read (stage 2: the shard).
  void attach(optim::Optimizer& optimizer) const;

  // Zeroes the gradients (stage 1: the full buffer; stage 2: the shard) before a step's first
  // micro-batch.
  void begin_step(StreamRef stream = {}) override;
  // Stage 1: for every micro-batch but the last of a step (see GradientReducer::no_sync).
  [[nodiscard]] ddp::NoSync no_sync();
  // Waits for the reductions of the backward that just ran on `stream` (stage 2: after every
  // micro-batch).
  void synchronize(StreamRef stream = {});
  // After a failed backward: waits for what was started and forgets the iteration (every rank).
  void abandon_iteration() noexcept;
  // Stages 1, 2: every rank's updated slice of the values to every rank, unit by unit (after the
  // optimizer). Stage 3: releases what is gathered (the next use gathers the updated slices).
  void gather_values(StreamRef stream = {});
  // Stage 3: gathers every unit into a full value buffer, so the model holds all its values (to
  // read or export them, or before destroying the engine). Collective. The next begin_step()
  // shards them again.
  void unshard_values(StreamRef stream = {});
  // Stage 3: the gathers since the last reset, and the value buffers.
  GatherReport gather_report() const noexcept;
  void reset_gather_report() noexcept;
  const ZeroOptions& options() const noexcept { return options_; }


  // GradientSync: ZeRO-1 accumulates all micro-batches but the last (no_sync) and reduces the last;
  // ZeRO-2 reduces every one into the shard. The optimizer works on ranges() (and, at stage 2, on
  // shard_gradients()); the norm and the inf check agree over the communicator.
  comm::Communicator* communicator() const noexcept override { return &comm_; }
  ddp::NoSync micro_batch(bool last) override;
  void after_backward(bool last, StreamRef stream) override;
  void abandon_step() noexcept override { abandon_iteration(); }
  std::vector<model::ShardRange> optimizer_ranges() const override { return ranges_; }
  Tensor optimizer_gradients() const override { return shard_grads_; }
  comm::Communicator* shard_group() const noexcept override { return &comm_; }
  void after_update(StreamRef stream) override { gather_values(stream); }
  void values_changed() noexcept override;
  const ddp::ReducerStats& stats() const noexcept override { return scheduler_->stats(); }
  std::vector<ddp::BucketLayout> bucket_layout() const override { return scheduler_->bucket_layout(); }

  // Stages 2, 3: the reduced gradient of this rank's part, packed like the optimizer's state.
  const Tensor& shard_gradients() const noexcept { return shard_grads_; }
  // Stages 2, 3: full-unit gradient buffers allocated so far (the pool's size; each has its unit's size).
  std::size_t pool_buffers() const noexcept { return pool_allocated_; }
  std::int64_t pool_bytes() const noexcept { return pool_bytes_; }

 private:
  ddp::PendingReduction start(const ddp::ScheduledBucket& bucket, StreamRef stream) override;
  ddp::PendingReduction stand_in(const ddp::ScheduledBucket& bucket, StreamRef stream) override;
  Tensor unit_gradients(std::size_t unit) const;
  void bind_buffer(std::size_t unit, StreamRef stream);
  void release_buffer(std::size_t unit);
  void release_all_buffers() noexcept;
  bool values_sharded() const noexcept;
  void before_forward(std::size_t unit, StreamRef stream);
  void after_forward(std::size_t unit);
  void before_backward(std::size_t unit, StreamRef stream);
  void after_backward(std::size_t unit);
  bool is_root(std::size_t unit) const;
  // The next unit to prefetch after `unit` (forward: the next non-root unit in index order;
  // backward: the previous one, the last after a root); units().size() when there is none.
  std::size_t next_forward(std::size_t unit) const;
  std::size_t next_backward(std::size_t unit) const;

  comm::Communicator& comm_;
  model::Model& model_;
  model::ParameterSpace& space_;
  int stage_;
  ZeroOptions options_;
  std::unique_ptr<ddp::BucketScheduler> scheduler_;
  std::unique_ptr<detail::GatheredUnits> gathered_;  // stage 3
  std::vector<bool> root_;                           // per unit: a root unit of the model
  model::Model::HooksId hooks_ = 0;
  bool last_micro_batch_ = true;
  Tensor shard_grads_;
  std::vector<model::ShardRange> ranges_;
  std::vector<Tensor> free_;           // pool buffers not bound to a unit
  std::vector<Tensor> bound_buffers_;  // per unit: the pool buffer its gradients are a view of
  std::size_t pool_allocated_ = 0;
  std::int64_t pool_bytes_ = 0;
  std::vector<bool> started_;  // per unit: its reduction started in this micro-batch
};

// The layout to build a model in for training at `stage` (0: DDP) over `data_group` (null: one
// process), so that building it allocates only what the stage keeps, with no full copy on the way:
// every value and gradient (DDP, ZeRO-1), every value and no flat gradient buffer (ZeRO-2), this
// rank's slices of the values and no gradient buffer (ZeRO-3). A model built in the default layout
// trains at any stage too, after a full copy while it is laid out again. For example
//   loom::nn::GPT model(config, precision, device, seed, loom::shard::space_layout(3, comm));
model::SpaceLayout space_layout(int stage, const comm::Communicator* data_group);

}  // namespace loom::shard
