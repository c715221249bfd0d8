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
//     model.zero_grad();
//     { auto skip = ddp.no_sync(); model.forward(a); model.backward(); }  // accumulate only
//     model.forward(b); model.backward();                                 // reduces as it goes
//     ddp.synchronize();
//     optimizer.step(...);
//   }
//
// Buckets follow the reverse of the space's order (backward order; the first one small so
// communication starts early). The plan depends only on the layout, never on the order observed
// at run time. Construction lays the space out for the communicator's ranks, verifies that every
// rank has the same space (parameters, shapes, dtypes, units) and copies rank 0's values to the
// others. With Bucketing::by_unit every bucket is one whole unit (what ZeRO reduce-scatters).
//
// A parameter that received no gradient since the last synchronize() is an error on every rank,
// naming it and the rank (after the reductions finished, so no rank hangs), unless
// unused_parameters is reduce_zero: then its gradient is zeroed and reduced with the rest (models
// whose graph varies). Likewise any failure on one rank (a hook, a communication error, a bad
// argument at construction) becomes an error on every rank naming that rank, through one small
// agreement all-reduce per synchronize(), so the ranks never disagree on what to issue next.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/ddp/comm_hook.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::ddp {

enum class UnusedParameters { error, reduce_zero };
enum class Bucketing { by_size, by_unit };

struct ReducerOptions {
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  std::int64_t first_bucket_bytes = std::int64_t{1} << 20;  // small, so communication starts early
  Bucketing bucketing = Bucketing::by_size;  // by_unit ignores the two sizes above
  UnusedParameters unused_parameters = UnusedParameters::error;
  CommHook hook{};              // empty: average_hook(); see comm_hook.hpp for the others
  // Issued instead when `hook` throws on this rank, so the other ranks' collective still meets
  // its match (the failure is then reported on every rank). Empty: a plain average (all_reduce);
  // a hook that issues another collective (ZeRO's reduce-scatter) must name its own.
  CommHook fallback_hook{};
  bool broadcast_parameters = true;  // rank 0's values to every rank at construction
};

// What the last synchronize() saw.
struct ReducerStats {
  std::int64_t iteration = 0;         // synchronize() calls so far
  int buckets = 0;
  int started_during_backward = 0;    // buckets whose reduction started before synchronize()
  std::int64_t reductions_started = 0;  // bucket reductions started since construction
  // Time blocked in synchronize(): the communication backward did not hide, plus any wait for
  // slower ranks (and on a GPU the host's wait for queued backward kernels).
  double synchronize_seconds = 0;
};

struct BucketLayout {
  std::int64_t begin = 0;                     // first element in the parameter space
  std::int64_t elements = 0;                  // f32 elements, alignment padding included
  std::vector<std::string> parameter_names;  // in bucket order
};

class GradientReducer {
 public:
  // space: the model's, on comm's device. It is laid out for comm.size() ranks here, so build
  // the optimizer after the reducer. The space must outlive the reducer.
  GradientReducer(comm::Communicator& comm, model::ParameterSpace& space, ReducerOptions options = {});
  // Waits for reductions still in flight (their errors are dropped) and detaches from the hooks.
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Starts every reduction not started yet, waits for all, and leaves the rank average of the
  // gradients accumulated since the last synchronize() in every parameter's gradient. Throws the
  // first communication error, or the unused-parameter error; either way the reducer is ready for
  // the next iteration. stream: the one backward ran on (CUDA), as for every call; reductions
  // started during backward wait for the stream each gradient was marked ready with.
  void synchronize(StreamRef stream = {});

  // While a NoSync is alive, backward only accumulates gradients (gradient accumulation: wrap every
  // micro-batch but the last). Scopes nest. Opening one after a synchronized backward, before
  // synchronize(), is an error (it would write gradients that are being reduced).
  class NoSync {
   public:
    explicit NoSync(GradientReducer& reducer) : reducer_(&reducer) { ++reducer_->no_sync_depth_; }
    ~NoSync() { if (reducer_ != nullptr) --reducer_->no_sync_depth_; }
    NoSync(NoSync&& other) noexcept : reducer_(other.reducer_) { other.reducer_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    GradientReducer* reducer_;
  };
  [[nodiscard]] NoSync no_sync();

  // Waits for the oldest reduction still in flight and runs its finish step (a ZeRO-2 gradient
  // pool reuses that bucket's buffer next). Returns false when none is in flight. A failure is
  // kept for synchronize(), which reports it on every rank.
  bool complete_oldest_reduction() noexcept;
  // After backward failed part-way: waits for the reductions it started (their errors dropped,
  // their finish steps not run) and forgets the iteration, so the next step starts clean. Every rank must do the same (a rank
  // whose backward failed cannot take part in this iteration's collectives).
  void abandon_iteration() noexcept;

  comm::Communicator& communicator() const noexcept { return comm_; }
  std::vector<BucketLayout> bucket_layout() const;
  const ReducerStats& stats() const noexcept { return stats_; }

 private:
  struct Bucket;
  void on_grad_ready(std::size_t index, StreamRef stream);
  void mark_ready(std::size_t index);
  void start_ready_buckets(StreamRef stream);
  void install_buckets();
  Tensor bucket_gradients(const Bucket& bucket) const;
  void settle_unready(std::vector<std::size_t>& never_used, StreamRef stream);
  std::exception_ptr wait_for_buckets(bool run_finish = true) noexcept;
  void throw_unused(const std::vector<std::size_t>& never_used);
  void reset_iteration();

  comm::Communicator& comm_;
  model::ParameterSpace& space_;
  std::vector<model::Parameter*> parameters_;  // the space's slots, in order
  ReducerOptions options_;
  std::vector<model::Parameter::HookId> hook_ids_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  // This iteration: gradient final (outside no_sync), gradient touched at all.
  std::vector<bool> ready_, used_;
  std::size_t ready_count_ = 0;
  std::size_t next_to_start_ = 0;
  std::exception_ptr hook_failure_;  // a communication hook that threw during this backward
  int no_sync_depth_ = 0;
  ReducerStats stats_;
};

}  // namespace loom::ddp
