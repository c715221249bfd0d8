#include "loom/ddp/gradient_reducer.hpp"

#include <chrono>
#include <optional>
#include <set>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/ddp/replicas.hpp"
#include "src/ddp/bucket_plan.hpp"
#include "loom/comm/agreement.hpp"

namespace loom::ddp {

struct GradientReducer::Bucket {
  std::int64_t begin = 0, end = 0;  // elements of the space
  std::size_t unit = 0;
  std::vector<std::size_t> parameters;  // slots of the space
  std::vector<std::string> names;
  std::size_t pending = 0;  // gradients not ready yet this iteration
  std::optional<PendingReduction> reduction;
  bool finished = false;  // its reduction completed early (complete_oldest_reduction)
};

namespace {

void validate(const comm::Communicator& comm, const model::ParameterSpace& space, const ReducerOptions& options) {
  require(space.device() == comm.device(), "gradient reducer: the parameters live on ", space.device(), " but the ",
          comm.backend(), " communicator on ", comm.device());
  require(options.bucket_bytes >= 0 && options.first_bucket_bytes >= 0, "gradient reducer: bucket sizes must be >= 0, "
          "got bucket_bytes ", options.bucket_bytes, " and first_bucket_bytes ", options.first_bucket_bytes);
}

// What must match on every rank besides the parameters (a different bucket plan would pair
// unrelated gradients, a different mode a different number of collectives).
std::string describe(const ReducerOptions& o) {
  return loom::detail::concat("bucket_bytes ", o.bucket_bytes, ", first_bucket_bytes ", o.first_bucket_bytes,
                              ", bucketing ", o.bucketing == Bucketing::by_unit ? "by_unit" : "by_size",
                              ", unused_parameters ",
                              o.unused_parameters == UnusedParameters::error ? "error" : "reduce_zero",
                              ", broadcast_parameters ", o.broadcast_parameters);
}

}  // namespace

GradientReducer::GradientReducer(comm::Communicator& comm, model::ParameterSpace& space, ReducerOptions options)
    : comm_(comm), space_(space), parameters_(space.parameters()), options_(std::move(options)) {
  std::exception_ptr invalid;
  try {
    validate(comm_, space_, options_);
    space_.repartition(comm_.size());
  } catch (...) {
    invalid = std::current_exception();
  }
  comm::throw_if_any_failed(comm_, invalid, "gradient reducer");
  verify_same_parameters(comm_, parameters_);
  if (const auto d = comm::first_difference(comm_, {describe(options_), space_.describe()})) {
    fail(ErrorCategory::invalid_argument, "gradient reducer: ", d->index == 0 ? "the options" : "the parameter spaces",
         " differ across ranks: rank 0 has ", d->on_rank_0, " but rank ", d->rank, " has ", d->on_that_rank);
  }
  if (!options_.hook) options_.hook = average_hook();
  if (!options_.fallback_hook) options_.fallback_hook = average_hook();
  if (options_.broadcast_parameters) comm_.broadcast(space_.values(), 0).wait();
  const std::size_t n = parameters_.size();
  ready_.assign(n, false);
  used_.assign(n, false);
  bucket_of_.assign(n, 0);
  install_buckets();
  for (std::size_t i = 0; i < n; ++i) {
    hook_ids_.push_back(parameters_[i]->add_grad_ready_hook([this, i](model::Parameter&, StreamRef stream) { on_grad_ready(i, stream); }));
  }
}

GradientReducer::~GradientReducer() {
  for (std::size_t i = 0; i < hook_ids_.size(); ++i) parameters_[i]->remove_grad_ready_hook(hook_ids_[i]);
  abandon_iteration();
}

void GradientReducer::install_buckets() {
  const auto plan = detail::plan_buckets(space_, options_.bucket_bytes, options_.first_bucket_bytes,
                                         options_.bucketing == Bucketing::by_unit);
  for (const detail::PlannedBucket& planned : plan) {
    auto bucket = std::make_unique<Bucket>();
    bucket->begin = planned.begin;
    bucket->end = planned.end;
    bucket->unit = planned.unit;
    bucket->parameters = planned.slots;
    bucket->pending = planned.slots.size();
    for (const std::size_t slot : planned.slots) {
      bucket->names.push_back(parameters_[slot]->name());
      bucket_of_[slot] = buckets_.size();
    }
    buckets_.push_back(std::move(bucket));
  }
  stats_.buckets = static_cast<int>(buckets_.size());
}

Tensor GradientReducer::bucket_gradients(const Bucket& bucket) const {
  if (space_.grads_allocated()) return space_.grads().slice(bucket.begin, bucket.end);
  // Released gradients (ZeRO-2): a by_unit bucket's gradients are the buffer bound to its unit.
  const Tensor& bound = space_.bound_unit_grads(bucket.unit);
  require(bound.defined() && options_.bucketing == Bucketing::by_unit, "gradient reducer: unit '",
          space_.units()[bucket.unit].name, "' has no gradient buffer to reduce");
  return bound;
}

GradientReducer::NoSync GradientReducer::no_sync() {
  require(ready_count_ == 0, "gradient reducer: no_sync() after a synchronized backward and before synchronize(): its "
          "micro-batch would add to gradients already being reduced; run the no_sync micro-batches first");
  return NoSync(*this);
}

void GradientReducer::on_grad_ready(std::size_t index, StreamRef stream) {
  require(!ready_[index], "gradient reducer: parameter '", parameters_[index]->name(), "' got another gradient after "
          "its final one in this iteration, while it may be being reduced: run all micro-batches but the last inside "
          "no_sync() and call synchronize() after the last (or abandon_iteration() after a failed backward)");
  used_[index] = true;
  if (no_sync_depth_ > 0) return;
  mark_ready(index);
  start_ready_buckets(stream);
}

void GradientReducer::mark_ready(std::size_t index) {
  ready_[index] = true;
  ++ready_count_;
  --buckets_[bucket_of_[index]]->pending;
}

void GradientReducer::start_ready_buckets(StreamRef stream) {
  // Strictly in bucket order, so every rank issues the same collectives in the same order even
  // when gradients become ready in a different order on different ranks.
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_]->pending == 0) {
    Bucket& bucket = *buckets_[next_to_start_];
    Tensor gradients;
    try {
      gradients = bucket_gradients(bucket);
      const GradBucket view{static_cast<int>(next_to_start_), gradients, bucket.names, stream, bucket.begin};
      bucket.reduction = options_.hook(comm_, view);
    } catch (...) {
      // Kept for synchronize(), which fails every rank with it. Backward goes on, and the plain
      // average stands in, so this rank still issues the collective the others wait for.
      if (!hook_failure_) hook_failure_ = std::current_exception();
      try {
        if (!gradients.defined()) gradients = Tensor::zeros({bucket.end - bucket.begin}, DType::f32, comm_.device());
        const GradBucket view{static_cast<int>(next_to_start_), gradients, bucket.names, stream, bucket.begin};
        bucket.reduction = options_.fallback_hook(comm_, view);
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
template <class Bucket>
std::exception_ptr complete(Bucket& bucket, bool run_finish = true) noexcept {
  std::exception_ptr failure;
  try {
    bucket.reduction->work.wait();
    if (run_finish && bucket.reduction->finish) bucket.reduction->finish();
  } catch (...) {
    failure = std::current_exception();
  }
  bucket.finished = true;
  return failure;
}

}  // namespace

std::exception_ptr GradientReducer::wait_for_buckets(bool run_finish) noexcept {
  // Every started reduction is waited for, even after a failure: nothing stays in flight.
  std::exception_ptr failure;
  for (auto& bucket : buckets_) {
    if (bucket->reduction && !bucket->finished) {
      if (std::exception_ptr f = complete(*bucket, run_finish); f && !failure) failure = f;
    }
    bucket->reduction.reset();
  }
  return failure;
}

void GradientReducer::synchronize(StreamRef stream) {
  const auto start = std::chrono::steady_clock::now();
  const int started_early = static_cast<int>(next_to_start_);
  std::vector<std::size_t> never_used;
  std::exception_ptr failure = hook_failure_;
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
  if (agreed[1] > 0 && options_.unused_parameters == UnusedParameters::error) throw_unused(never_used);
  stats_.synchronize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void GradientReducer::throw_unused(const std::vector<std::size_t>& never_used) {
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

void GradientReducer::settle_unready(std::vector<std::size_t>& never_used, StreamRef stream) {
  // Reverse registration order, the same on every rank, for the gradients backward never marked
  // ready outside no_sync: those touched inside no_sync carry real gradients; the others are unused.
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    if (ready_[i]) continue;
    if (!used_[i]) {
      never_used.push_back(i);
      if (options_.unused_parameters == UnusedParameters::reduce_zero) fill(parameters_[i]->grad(), 0.0, stream);
    }
    mark_ready(i);
  }
}

bool GradientReducer::complete_oldest_reduction() noexcept {
  for (auto& bucket : buckets_) {
    if (!bucket->reduction || bucket->finished) continue;
    if (std::exception_ptr f = complete(*bucket); f && !hook_failure_) hook_failure_ = f;
    return true;
  }
  return false;
}

void GradientReducer::abandon_iteration() noexcept {
  (void)wait_for_buckets(false);
  reset_iteration();
}

void GradientReducer::reset_iteration() {
  ready_.assign(parameters_.size(), false);
  used_.assign(parameters_.size(), false);
  ready_count_ = 0;
  next_to_start_ = 0;
  hook_failure_ = nullptr;
  for (auto& bucket : buckets_) {
    bucket->pending = bucket->parameters.size();
    bucket->reduction.reset();
    bucket->finished = false;
  }
}

std::vector<BucketLayout> GradientReducer::bucket_layout() const {
  std::vector<BucketLayout> layout;
  for (const auto& bucket : buckets_) layout.push_back({bucket->begin, bucket->end - bucket->begin, bucket->names});
  return layout;
}

}  // namespace loom::ddp
