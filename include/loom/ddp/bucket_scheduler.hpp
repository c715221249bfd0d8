// The in-order bucket scheduler every gradient synchronisation is built on (DDP's all-reduce,
// ZeRO's reduce-scatter): it subscribes to the parameters' gradient-ready hooks and, when the last
// gradient of a bucket is final and every earlier bucket has started, asks its BucketCollective to
// start that bucket's reduction, so communication runs while the rest of backward computes.
// synchronize() starts what is left, waits for everything, and agrees across the ranks on what
// went wrong, so no rank hangs and every rank reports the same failure.
//
// Buckets are contiguous ranges of the parameter space, planned from its layout alone (never from
// the order observed at run time): buckets_by_size (DDP) or buckets_by_unit (ZeRO). Reductions
// start strictly in bucket order, so every rank issues the same collectives in the same order even
// when gradients become ready in a different order on different ranks.
//
// A parameter that received no gradient since the last synchronize() is an error on every rank,
// naming it and the rank (after the reductions finished), unless unused_parameters is reduce_zero:
// then its gradient is zeroed and reduced with the rest. A collective that fails to start on one
// rank (a hook that throws) is replaced by the collective's stand-in, so the other ranks' match
// meets it, and synchronize() fails on every rank with the first rank's error.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/ddp/comm_hook.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::ddp {

enum class UnusedParameters { error, reduce_zero };

// One bucket of the plan: the space's slots it holds (in backward order) and the contiguous range
// [begin, end) of the space they lie in, alignment gaps included.
struct PlannedBucket {
  std::vector<std::size_t> slots;
  std::int64_t begin = 0, end = 0;
  std::size_t unit = 0;  // the unit of its first slot (buckets_by_unit: its only unit)
};

// Backward order (the reverse of the space's). A bucket closes once it holds at least its cap in
// bytes of gradients (first_bucket_bytes for the first, small so communication starts early;
// bucket_bytes for the rest), so one large gradient can make a bucket larger than the cap; a cap
// <= 0 puts every gradient in a bucket of its own.
std::vector<PlannedBucket> buckets_by_size(const model::ParameterSpace& space, std::int64_t bucket_bytes,
                                           std::int64_t first_bucket_bytes);
// One bucket per unit, covering the whole padded unit, last unit first (what ZeRO reduce-scatters).
std::vector<PlannedBucket> buckets_by_unit(const model::ParameterSpace& space);

// A bucket as the scheduler hands it to its collective.
struct ScheduledBucket {
  int index = 0;  // 0 = the first bucket to be ready in backward
  std::int64_t begin = 0, end = 0;
  std::size_t unit = 0;
  const std::vector<std::string>& names;  // its parameters, in bucket order
};

// How a bucket is reduced: DDP all-reduces it through a CommHook, ZeRO reduce-scatters it.
class BucketCollective {
 public:
  virtual ~BucketCollective() = default;
  // Starts the bucket's reduction without waiting for it; called in bucket order, identically on
  // every rank, from the thread that runs backward. stream: the one its gradients were made on.
  virtual PendingReduction start(const ScheduledBucket& bucket, StreamRef stream) = 0;
  // After start() threw on this rank: issues the same collective as the other ranks' start(), so
  // that theirs meets its match; its result is discarded (synchronize() reports the failure).
  virtual PendingReduction stand_in(const ScheduledBucket& bucket, StreamRef stream) = 0;
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

class BucketScheduler;

// While a NoSync is alive, backward only accumulates gradients (gradient accumulation: wrap every
// micro-batch but the last). Scopes nest. A default-constructed one does nothing (a micro-batch
// that is reduced as usual).
class NoSync {
 public:
  NoSync() = default;
  explicit NoSync(BucketScheduler& scheduler);
  ~NoSync();
  NoSync(NoSync&& other) noexcept : scheduler_(other.scheduler_) { other.scheduler_ = nullptr; }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;
  NoSync& operator=(NoSync&&) = delete;

 private:
  BucketScheduler* scheduler_ = nullptr;
};

class BucketScheduler {
 public:
  // The space's slots must be laid out already (ParameterSpace::repartition); comm, space and
  // collective must outlive the scheduler.
  BucketScheduler(comm::Communicator& comm, model::ParameterSpace& space, std::vector<PlannedBucket> plan,
                  BucketCollective& collective, UnusedParameters unused_parameters);
  // Waits for reductions still in flight (their errors are dropped) and detaches from the hooks.
  ~BucketScheduler();
  BucketScheduler(const BucketScheduler&) = delete;
  BucketScheduler& operator=(const BucketScheduler&) = delete;

  // Starts every reduction not started yet, waits for all (running each one's finish step), and
  // agrees across the ranks: throws on every rank the first failed rank's error, or the
  // unused-parameter error. Either way the scheduler is ready for the next iteration.
  void synchronize(StreamRef stream = {});
  // Opening one after a synchronized backward, before synchronize(), is an error (its micro-batch
  // would write gradients that are being reduced).
  [[nodiscard]] NoSync no_sync();
  // Orders `stream` after the oldest reduction still in flight (Work::wait_on: on a GPU the host
  // does not wait) and runs its finish step (a pool of gradient buffers gets that bucket's buffer
  // back, for work enqueued on `stream`). Returns false when none is in flight. A failure is kept
  // for synchronize(), which waits for the reduction on the host and reports it on every rank.
  bool complete_oldest(StreamRef stream) noexcept;
  // After backward failed part-way: waits for the reductions it started (their errors dropped,
  // their finish steps not run) and forgets the iteration. Every rank must do the same.
  void abandon_iteration() noexcept;

  comm::Communicator& communicator() const noexcept { return comm_; }
  std::vector<BucketLayout> bucket_layout() const;
  const ReducerStats& stats() const noexcept { return stats_; }

 private:
  friend class NoSync;
  struct Bucket;
  void on_grad_ready(std::size_t index, StreamRef stream);
  void mark_ready(std::size_t index);
  void start_ready_buckets(StreamRef stream);
  void settle_unready(std::vector<std::size_t>& never_used, StreamRef stream);
  std::exception_ptr wait_for_buckets(bool run_finish = true) noexcept;
  void throw_unused(const std::vector<std::size_t>& never_used);
  void reset_iteration();

  comm::Communicator& comm_;
  std::vector<model::Parameter*> parameters_;  // the space's slots, in order
  BucketCollective& collective_;
  UnusedParameters unused_parameters_;
  std::vector<model::Parameter::HookId> hook_ids_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  // This iteration: gradient final (outside no_sync), gradient touched at all.
  std::vector<bool> ready_, used_;
  std::size_t ready_count_ = 0;
  std::size_t next_to_start_ = 0;
  std::exception_ptr start_failure_;  // a collective that failed to start during this backward
  int no_sync_depth_ = 0;
  ReducerStats stats_;
};

}  // namespace loom::ddp
