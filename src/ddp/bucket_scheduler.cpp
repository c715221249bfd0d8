#include "loom/ddp/bucket_scheduler.hpp"

#include <chrono>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::ddp {

struct BucketScheduler::Bucket {
  std::int64_t begin = 0, end = 0;  // elements of the space
  std::size_t unit = 0;
  std::vector<std::size_t> parameters;  // slots of the space
  std::vector<std::string> names;
  std::size_t pending = 0;  // gradients not ready yet this iteration
  std::optional<PendingReduction> reduction;
  bool finished = false;  // its reduction completed early (complete_oldest)
};

NoSync::NoSync(BucketScheduler& scheduler) : scheduler_(&scheduler) { ++scheduler_->no_sync_depth_; }

NoSync::~NoSync() {
  if (scheduler_ != nullptr) --scheduler_->no_sync_depth_;
}

BucketScheduler::BucketScheduler(comm::Communicator& comm, model::ParameterSpace& space,
                                 std::vector<PlannedBucket> plan, BucketCollective& collective,
                                 UnusedParameters unused_parameters)
    : comm_(comm), parameters_(space.parameters()), collective_(collective), unused_parameters_(unused_parameters) {
  const std::size_t n = parameters_.size();
  ready_.assign(n, false);
  used_.assign(n, false);
  bucket_of_.assign(n, 0);
  for (PlannedBucket& planned : plan) {
    auto bucket = std::make_unique<Bucket>();
    bucket->begin = planned.begin;
    bucket->end = planned.end;
    bucket->unit = planned.unit;
    bucket->pending = planned.slots.size();
    for (const std::size_t slot : planned.slots) {
      bucket->names.push_back(parameters_[slot]->name());
      bucket_of_[slot] = buckets_.size();
    }
    bucket->parameters = std::move(planned.slots);
    buckets_.push_back(std::move(bucket));
  }
  stats_.buckets = static_cast<int>(buckets_.size());
  for (std::size_t i = 0; i < n; ++i) {
    hook_ids_.push_back(parameters_[i]->add_grad_ready_hook(
        [this, i](model::Parameter&, StreamRef stream) { on_grad_ready(i, stream); }));
  }
}

BucketScheduler::~BucketScheduler() {
  for (std::size_t i = 0; i < hook_ids_.size(); ++i) parameters_[i]->remove_grad_ready_hook(hook_ids_[i]);
  abandon_iteration();
}

NoSync BucketScheduler::no_sync() {
  require(ready_count_ == 0, "gradient reducer: no_sync() after a synchronized backward and before synchronize(): its "
          "micro-batch would add to gradients already being reduced; run the no_sync micro-batches first");
  return NoSync(*this);
}

void BucketScheduler::on_grad_ready(std::size_t index, StreamRef stream) {
  require(!ready_[index], "gradient reducer: parameter '", parameters_[index]->name(), "' got another gradient after "
          "its final one in this iteration, while it may be being reduced: run all micro-batches but the last inside "
          "no_sync() and call synchronize() after the last (or abandon_iteration() after a failed backward)");
  used_[index] = true;
  if (no_sync_depth_ > 0) return;
  mark_ready(index);
  start_ready_buckets(stream);
}

void BucketScheduler::mark_ready(std::size_t index) {
  ready_[index] = true;
  ++ready_count_;
  --buckets_[bucket_of_[index]]->pending;
}

void BucketScheduler::start_ready_buckets(StreamRef stream) {
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_]->pending == 0) {
    Bucket& bucket = *buckets_[next_to_start_];
    const ScheduledBucket view{static_cast<int>(next_to_start_), bucket.begin, bucket.end, bucket.unit, bucket.names};
    try {
      bucket.reduction = collective_.start(view, stream);
    } catch (...) {
      // Kept for synchronize(), which fails every rank with it. Backward goes on, and the stand-in
      // is issued, so this rank still takes part in the collective the others wait in.
      if (!start_failure_) start_failure_ = std::current_exception();
      try {
        bucket.reduction = collective_.stand_in(view, stream);
        bucket.reduction->finish = {};
      } catch (...) {  // the communicator itself failed: its timeout or abort reaches every rank
      }
    }
    ++next_to_start_;
    ++stats_.reductions_started;
  }
}

namespace {

// Waits for a started reduction and runs its finish step (unless abandoning); returns what
// failed, if anything.
// early: ahead of synchronize(), to free its buffer (complete_oldest): only `stream` waits for the
// reduction (on a GPU; the host on the CPU) before the finish step is enqueued on it, and
// synchronize() later waits on the host to see its error.
template <class Bucket>
std::exception_ptr complete(Bucket& bucket, bool run_finish = true, const StreamRef* early = nullptr) noexcept {
  std::exception_ptr failure;
  try {
    if (early != nullptr) bucket.reduction->work.wait_on(*early);
    else bucket.reduction->work.wait();
    if (run_finish && bucket.reduction->finish) bucket.reduction->finish();
  } catch (...) {
    failure = std::current_exception();
  }
  bucket.finished = true;
  return failure;
}

}  // namespace

std::exception_ptr BucketScheduler::wait_for_buckets(bool run_finish) noexcept {
  // Every started reduction is waited for, even after a failure: nothing stays in flight.
  std::exception_ptr failure;
  for (auto& bucket : buckets_) {
    if (bucket->reduction && !bucket->finished) {
      if (std::exception_ptr f = complete(*bucket, run_finish); f && !failure) failure = f;
    } else if (bucket->reduction) {  // finished early, on the device: its error shows here
      try {
        bucket->reduction->work.wait();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    bucket->reduction.reset();
  }
  return failure;
}

void BucketScheduler::synchronize(StreamRef stream) {
  const auto start = std::chrono::steady_clock::now();
  const int started_early = static_cast<int>(next_to_start_);
  std::vector<std::size_t> never_used;
  std::exception_ptr failure = start_failure_;
  try {
    require(no_sync_depth_ == 0, "gradient reducer: synchronize() inside a no_sync() scope");
    settle_unready(never_used, stream);
    start_ready_buckets(stream);
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  if (std::exception_ptr waited = wait_for_buckets(); waited && !failure) failure = waited;
  ++stats_.iteration;
  stats_.started_during_backward = started_early;
  reset_iteration();
  // One agreement per iteration, whatever happened: the lowest failed rank (as size - rank, so that
  // max finds it) and whether any rank left a parameter unused.
  const auto size = static_cast<std::int64_t>(comm_.size());
  std::vector<std::int64_t> agreed;
  try {
    agreed = comm::all_reduce_values(
        comm_, {failure ? size - comm_.rank() : 0, static_cast<std::int64_t>(never_used.size())}, comm::ReduceOp::max);
  } catch (...) {
    if (failure) std::rethrow_exception(failure);  // the communicator itself is broken: report the cause
    throw;
  }
  stats_.synchronize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (agreed[0] > 0) {
    comm::throw_failure_of(comm_, static_cast<int>(size - agreed[0]), failure, "gradient reducer: synchronize()");
  }
  if (agreed[1] > 0 && unused_parameters_ == UnusedParameters::error) throw_unused(never_used);
  stats_.synchronize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BucketScheduler::throw_unused(const std::vector<std::size_t>& never_used) {
  // Per parameter, the lowest rank that left it without a gradient (size: none).
  const auto size = static_cast<std::int64_t>(comm_.size());
  std::vector<std::int64_t> missing(parameters_.size(), size);
  for (const std::size_t i : never_used) missing[i] = comm_.rank();
  missing = comm::all_reduce_values(comm_, missing, comm::ReduceOp::min);
  std::string names;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    if (missing[i] == size) continue;
    names += loom::detail::concat(names.empty() ? "" : ", ", "'", parameters_[i]->name(), "' (rank ", missing[i], ")");
  }
  throw Error(ErrorCategory::invalid_argument,
              loom::detail::concat("gradient reducer: parameters received no gradient since the last synchronize(): ",
                                   names, " (the lowest rank without it named). Their gradients were averaged as they "
                                   "were. If the model leaves parameters unused in some steps, set "
                                   "ReducerOptions::unused_parameters = reduce_zero"),
              comm_.rank());
}

void BucketScheduler::settle_unready(std::vector<std::size_t>& never_used, StreamRef stream) {
  // Reverse registration order, the same on every rank, for the gradients backward never marked
  // ready outside no_sync: those touched inside no_sync carry real gradients; the others are unused.
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    if (ready_[i]) continue;
    if (!used_[i]) {
      never_used.push_back(i);
      // A parameter without a gradient buffer (one released by ZeRO-2) is zero where the
      // collective's buffer is bound.
      if (unused_parameters_ == UnusedParameters::reduce_zero && parameters_[i]->grad().defined()) {
        fill(parameters_[i]->grad(), 0.0, stream);
      }
    }
    mark_ready(i);
  }
}

bool BucketScheduler::complete_oldest(StreamRef stream) noexcept {
  for (auto& bucket : buckets_) {
    if (!bucket->reduction || bucket->finished) continue;
    if (std::exception_ptr f = complete(*bucket, true, &stream); f && !start_failure_) start_failure_ = f;
    return true;
  }
  return false;
}

void BucketScheduler::abandon_iteration() noexcept {
  (void)wait_for_buckets(false);
  reset_iteration();
}

void BucketScheduler::reset_iteration() {
  ready_.assign(parameters_.size(), false);
  used_.assign(parameters_.size(), false);
  ready_count_ = 0;
  next_to_start_ = 0;
  start_failure_ = nullptr;
  for (auto& bucket : buckets_) {
    bucket->pending = bucket->parameters.size();
    bucket->reduction.reset();
    bucket->finished = false;
  }
}

std::vector<BucketLayout> BucketScheduler::bucket_layout() const {
  std::vector<BucketLayout> layout;
  for (const auto& bucket : buckets_) layout.push_back({bucket->begin, bucket->end - bucket->begin, bucket->names});
  return layout;
}

}  // namespace loom::ddp
