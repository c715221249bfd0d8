// Gradient synchronisation: what a training step asks of data parallelism, whatever its kind. DDP
// (ddp::GradientReducer), each ZeRO stage (shard::ZeroEngine) and one process alone
// (ddp::LocalGradients) implement it, so a training loop never branches on the stage:
//
//   sync.begin_step(stream);
//   for (each micro-batch i of n) {
//     const bool last = i + 1 == n;
//     { NoSync scope = sync.micro_batch(last); model.forward(...); model.backward(...); }
//     sync.after_backward(last, stream);
//   }
//   // the optimizer, built over sync.optimizer_ranges(), reads sync.optimizer_gradients() if
//   // defined; norms and inf checks over its gradients agree over sync.shard_group() if not null
//   optimizer.step(...);
//   sync.after_update(stream);
//
// After a micro-batch whose forward or backward failed, abandon_step() waits for what was started
// and forgets the step (on every rank).
#pragma once

#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/ddp/bucket_scheduler.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::ddp {

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // 0: the whole model on every rank (DDP or one process); 1, 2: ZeRO's stage.
  virtual int zero_stage() const noexcept = 0;
  // The data-parallel group; null for one process.
  virtual comm::Communicator* communicator() const noexcept = 0;

  // Zeroes the gradients the step accumulates into, before its first micro-batch.
  virtual void begin_step(StreamRef stream) = 0;
  // Held around one micro-batch's forward and backward: the micro-batches whose gradients are only
  // accumulated (all but the last under DDP and ZeRO-1) run inside a NoSync.
  [[nodiscard]] virtual NoSync micro_batch(bool last) = 0;
  // After a micro-batch's backward: waits for its reductions where the implementation reduces it
  // (the last under DDP and ZeRO-1, every one under ZeRO-2). Collective.
  virtual void after_backward(bool last, StreamRef stream) = 0;
  // After a failed forward or backward: nothing stays in flight into the next step.
  virtual void abandon_step() noexcept = 0;

  // The parts of the space this rank's optimizer updates (empty: all of it).
  virtual std::vector<model::ShardRange> optimizer_ranges() const = 0;
  // Where that optimizer reads its gradients, packed like its state (undefined: the space's).
  virtual Tensor optimizer_gradients() const { return {}; }
  // The group the optimizer's gradients are split over, for the norm and the inf check (null:
  // every rank holds all of them).
  virtual comm::Communicator* shard_group() const noexcept { return nullptr; }
  // After the optimizer updated its ranges (ZeRO: the values are all-gathered). Collective.
  virtual void after_update(StreamRef stream) = 0;

  // After the values were written from outside (a checkpoint loaded): nothing kept of the old
  // ones is used again (ZeRO-3 releases what it has gathered). Not collective.
  virtual void values_changed() noexcept {}

  // What the last after_backward() that reduced saw, and the buckets (empty for one process).
  virtual const ReducerStats& stats() const noexcept = 0;
  virtual std::vector<BucketLayout> bucket_layout() const = 0;
};

// One process: gradients are zeroed and kept.
class LocalGradients final : public GradientSync {
 public:
  explicit LocalGradients(model::ParameterSpace& space) : space_(space) {}
  int zero_stage() const noexcept override { return 0; }
  comm::Communicator* communicator() const noexcept override { return nullptr; }
  void begin_step(StreamRef stream) override { space_.zero_grads(stream); }
  NoSync micro_batch(bool) override { return {}; }
  void after_backward(bool, StreamRef) override {}
  void abandon_step() noexcept override {}
  std::vector<model::ShardRange> optimizer_ranges() const override { return {}; }
  void after_update(StreamRef) override {}
  const ReducerStats& stats() const noexcept override { return stats_; }
  std::vector<BucketLayout> bucket_layout() const override { return {}; }

 private:
  model::ParameterSpace& space_;
  ReducerStats stats_;
};

}  // namespace loom::ddp
