// Data-parallel gradient reduction, overlapped with backward. The reducer works on a model's
// parameter space: each bucket is a contiguous range of the space's flat gradient buffer (the
// gradients already live there: nothing is copied), and it subscribes to the parameters'
// gradient-ready hooks. When the last gradient of a bucket is ready, and every earlier bucket has
// started, it starts that bucket's reduction asynchronously (through the communication hook), so
// communication runs while the rest of backward computes. synchronize() waits for what is left
// and leaves the average over the ranks in every gradient.
//
//   loom::ddp::GradientReducer ddp(world.comm(), model.parameter_space());  // before the optimizer
//   for (...) {
//     ddp.begin_step({});                                  // zeroes the gradients
//     { auto skip = ddp.no_sync(); model.forward(a_in, a_targets); model.backward(); }  // accumulate only
//     model.forward(b_in, b_targets); model.backward();    // reduces as it goes
//     ddp.synchronize();
//     optimizer.step(...);
//   }
// (train::Trainer does all of this; in one process it takes no communicator, nullptr, and uses
// ddp::LocalGradients instead.)
//
// Buckets follow the reverse of the space's order (backward order; the first one small so
// communication starts early): the BucketScheduler (bucket_scheduler.hpp) starts them in order and
// agrees on failures and unused parameters across the ranks. Construction lays the space out for
// the communicator's ranks, verifies that every rank has the same space (parameters, shapes,
// dtypes, units) and options, and copies rank 0's values to the others. The reducer is the DDP
// implementation of GradientSync (gradient_sync.hpp), which is how Trainer uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/ddp/bucket_scheduler.hpp"
#include "loom/ddp/comm_hook.hpp"
#include "loom/ddp/gradient_sync.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::ddp {

struct ReducerOptions {
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  std::int64_t first_bucket_bytes = std::int64_t{1} << 20;  // small, so communication starts early
  UnusedParameters unused_parameters = UnusedParameters::error;
  // Empty: average_hook(); see comm_hook.hpp for the others. When it throws on one rank, a plain
  // average stands in (the other ranks' all-reduce meets its match) and synchronize() fails on
  // every rank with the hook's error.
  CommHook hook{};
  bool broadcast_parameters = true;  // rank 0's values to every rank at construction
};

class GradientReducer final : public GradientSync, private BucketCollective {
 public:
  // space: the model's, on comm's device. It is laid out for comm.size() ranks here, so build
  // the optimizer after the reducer. The space must outlive the reducer.
  GradientReducer(comm::Communicator& comm, model::ParameterSpace& space, ReducerOptions options = {});
  // Waits for reductions still in flight (their errors are dropped) and detaches from the hooks.
  ~GradientReducer() override;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Starts every reduction not started yet, waits for all, and leaves the rank average of the
  // gradients accumulated since the last synchronize() in every parameter's gradient. Throws the
  // first communication error, or the unused-parameter error; either way the reducer is ready for
  // the next iteration. stream: the one backward ran on (CUDA), as for every call; reductions
  // started during backward wait for the stream each gradient was marked ready with.
  void synchronize(StreamRef stream = {}) { scheduler_->synchronize(stream); }

  // While a NoSync is alive, backward only accumulates gradients (gradient accumulation: wrap every
  // micro-batch but the last). Scopes nest. Opening one after a synchronized backward, before
  // synchronize(), is an error (it would write gradients that are being reduced).
  using NoSync = ddp::NoSync;
  [[nodiscard]] NoSync no_sync() { return scheduler_->no_sync(); }

  // After backward failed part-way: waits for the reductions it started (their errors dropped)
  // and forgets the iteration, so the next step starts clean. Every rank must do the same (a rank
  // whose backward failed cannot take part in this iteration's collectives).
  void abandon_iteration() noexcept { scheduler_->abandon_iteration(); }

  comm::Communicator* communicator() const noexcept override { return &comm_; }
  std::vector<BucketLayout> bucket_layout() const override { return scheduler_->bucket_layout(); }
  const ReducerStats& stats() const noexcept override { return scheduler_->stats(); }

  // GradientSync: every micro-batch but the last accumulates only; the last is reduced.
  int zero_stage() const noexcept override { return 0; }
  void begin_step(StreamRef stream) override { space_.zero_grads(stream); }
  NoSync micro_batch(bool last) override { return last ? NoSync() : no_sync(); }
  void after_backward(bool last, StreamRef stream) override {
    if (last) synchronize(stream);
  }
  void abandon_step() noexcept override { abandon_iteration(); }
  std::vector<model::ShardRange> optimizer_ranges() const override { return {}; }
  void after_update(StreamRef) override {}

 private:
  PendingReduction start(const ScheduledBucket& bucket, StreamRef stream) override;
  PendingReduction stand_in(const ScheduledBucket& bucket, StreamRef stream) override;

  comm::Communicator& comm_;
  model::ParameterSpace& space_;
  ReducerOptions options_;
  CommHook average_;
  std::unique_ptr<BucketScheduler> scheduler_;
};

}  // namespace loom::ddp
