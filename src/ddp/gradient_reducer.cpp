#include "loom/ddp/gradient_reducer.hpp"

#include <chrono>
#include <exception>
#include <optional>
#include <set>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/ddp/replicas.hpp"
#include "src/ddp/bucket_plan.hpp"
#include "src/ddp/host_values.hpp"

namespace loom::ddp {

struct GradientReducer::Bucket {
  Tensor buffer;
  std::vector<std::size_t> parameters;
  std::vector<std::string> names;
  std::size_t pending = 0;  // gradients not ready yet this iteration
  std::optional<PendingReduction> reduction;
};

namespace {

void validate(const comm::Communicator& comm, const std::vector<nn::Parameter*>& parameters,
              const ReducerOptions& options) {
  require(!parameters.empty(), "gradient reducer: no parameters to reduce");
  std::set<const nn::Parameter*> seen;
  for (const nn::Parameter* p : parameters) {
    require(p != nullptr, "gradient reducer: a null parameter");
    require(seen.insert(p).second, "gradient reducer: parameter '", p->name(), "' is listed twice");
    require(p->grad().dtype() == DType::f32 && p->grad().device() == comm.device(), "gradient reducer: parameter '",
            p->name(), "' has its gradient ", p->grad(), "; the ", comm.backend(), " communicator needs f32 on ",
            comm.device());
  }
  require(options.bucket_bytes >= 0 && options.first_bucket_bytes >= 0, "gradient reducer: bucket sizes must be >= 0, "
          "got bucket_bytes ", options.bucket_bytes, " and first_bucket_bytes ", options.first_bucket_bytes);
}

}  // namespace

GradientReducer::GradientReducer(comm::Communicator& comm, std::vector<nn::Parameter*> parameters,
                                 ReducerOptions options)
    : comm_(comm), parameters_(std::move(parameters)), options_(std::move(options)) {
  validate(comm_, parameters_, options_);
  if (!options_.hook) options_.hook = average_hook();
  verify_same_parameters(comm_, parameters_);
  if (options_.broadcast_parameters) broadcast_parameters(comm_, parameters_, 0);
  const std::size_t n = parameters_.size();
  ready_.assign(n, false);
  used_.assign(n, false);
  bucket_of_.assign(n, 0);
  std::vector<std::size_t> reverse_registration;
  for (std::size_t i = n; i-- > 0;) reverse_registration.push_back(i);
  install_buckets(reverse_registration);
  order_learned_ = !options_.rebuild_buckets;
  for (std::size_t i = 0; i < n; ++i) {
    hook_ids_.push_back(parameters_[i]->add_grad_ready_hook([this, i](nn::Parameter&) { on_grad_ready(i); }));
  }
}

GradientReducer::~GradientReducer() {
  for (std::size_t i = 0; i < hook_ids_.size(); ++i) parameters_[i]->remove_grad_ready_hook(hook_ids_[i]);
  for (auto& bucket : buckets_) {
    if (!bucket->reduction) continue;
    try {
      bucket->reduction->work.wait();
    } catch (...) {  // a destructor never throws; the communicator reports its own failure
    }
  }
}

void GradientReducer::install_buckets(const std::vector<std::size_t>& order) {
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : parameters_) numels.push_back(p->value().numel());
  const auto plan = detail::plan_buckets(order, numels, static_cast<std::int64_t>(sizeof(float)),
                                         options_.bucket_bytes, options_.first_bucket_bytes);
  std::vector<std::unique_ptr<Bucket>> buckets;
  for (const detail::PlannedBucket& planned : plan) {
    auto bucket = std::make_unique<Bucket>();
    bucket->buffer = Tensor::zeros({planned.elements}, DType::f32, comm_.device());
    bucket->parameters = planned.parameters;
    bucket->pending = planned.parameters.size();
    for (std::size_t k = 0; k < planned.parameters.size(); ++k) {
      nn::Parameter& p = *parameters_[planned.parameters[k]];
      const std::int64_t begin = planned.offsets[k];
      const Tensor view = bucket->buffer.slice(begin, begin + p.value().numel()).view(p.value().shape());
      copy(view, p.grad(), options_.stream);  // keeps whatever the gradient holds (an average, after a rebuild)
      p.set_grad(view);
      bucket->names.push_back(p.name());
      bucket_of_[planned.parameters[k]] = buckets.size();
    }
    buckets.push_back(std::move(bucket));
  }
  loom::synchronize(options_.stream);  // the copies read the old buffers, released below
  buckets_ = std::move(buckets);
  stats_.buckets = static_cast<int>(buckets_.size());
}

void GradientReducer::on_grad_ready(std::size_t index) {
  used_[index] = true;
  if (no_sync_depth_ > 0) return;
  require(!ready_[index], "gradient reducer: parameter '", parameters_[index]->name(), "' became ready twice "
          "before synchronize(): run all micro-batches but the last inside no_sync(), or synchronize() after each "
          "backward");
  mark_ready(index);
  start_ready_buckets();
}

void GradientReducer::mark_ready(std::size_t index) {
  ready_[index] = true;
  if (!order_learned_) observed_.push_back(index);
  --buckets_[bucket_of_[index]]->pending;
}

void GradientReducer::start_ready_buckets() {
  // Strictly in bucket order, so every rank issues the same collectives in the same order even
  // when gradients become ready in a different order on different ranks.
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_]->pending == 0) {
    Bucket& bucket = *buckets_[next_to_start_];
    comm_.set_stream(options_.stream);
    const GradBucket view{static_cast<int>(next_to_start_), bucket.buffer, bucket.names, options_.stream};
    bucket.reduction = options_.hook(comm_, view);
    ++next_to_start_;
  }
}

void GradientReducer::synchronize() {
  const auto start = std::chrono::steady_clock::now();
  require(no_sync_depth_ == 0, "gradient reducer: synchronize() inside a no_sync() scope");
  const int started_early = static_cast<int>(next_to_start_);
  std::vector<std::size_t> never_used;
  std::int64_t unused_anywhere = 0;
  std::exception_ptr failure;
  try {
    settle_unready(never_used);
    start_ready_buckets();
    if (options_.unused_parameters == UnusedParameters::error) {
      unused_anywhere =
          detail::all_reduce_value(comm_, static_cast<std::int64_t>(never_used.size()), comm::ReduceOp::max);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // Every started reduction is waited for, even after a failure: nothing stays in flight.
  for (auto& bucket : buckets_) {
    if (!bucket->reduction) continue;
    try {
      bucket->reduction->work.wait();
      if (bucket->reduction->finish) bucket->reduction->finish();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    bucket->reduction.reset();
  }
  ++stats_.iteration;
  stats_.started_during_backward = started_early;
  if (!failure && unused_anywhere > 0) {
    try {
      std::vector<std::int64_t> mine(parameters_.size(), 0);
      for (const std::size_t i : never_used) mine[i] = 1;
      const std::vector<std::int64_t> anywhere = detail::all_reduce_values(comm_, mine, comm::ReduceOp::max);
      std::string names, here;
      auto append = [](std::string& list, const std::string& name) { list += (list.empty() ? "'" : ", '") + name + "'"; };
      for (std::size_t i = 0; i < anywhere.size(); ++i) {
        if (anywhere[i] != 0) append(names, parameters_[i]->name());
        if (mine[i] != 0) append(here, parameters_[i]->name());
      }
      failure = std::make_exception_ptr(Error(
          ErrorCategory::invalid_argument,
          loom::detail::concat("gradient reducer: parameters received no gradient since the last synchronize() on some "
                               "rank: ", names, " (on this rank: ", here.empty() ? "none" : here,
                               "). Their gradients were averaged as they were. If the model leaves parameters unused "
                               "in some steps, set ReducerOptions::unused_parameters = reduce_zero"),
          comm_.rank()));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (!failure && !order_learned_) {
    try {
      learn_order();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  reset_iteration();
  stats_.synchronize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failure) std::rethrow_exception(failure);
}

void GradientReducer::settle_unready(std::vector<std::size_t>& never_used) {
  // Reverse registration order, the same on every rank, for the gradients backward never marked
  // ready outside no_sync: those touched inside no_sync carry real gradients; the others are unused.
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    if (ready_[i]) continue;
    if (!used_[i]) {
      never_used.push_back(i);
      if (options_.unused_parameters == UnusedParameters::reduce_zero) fill(parameters_[i]->grad(), 0.0, options_.stream);
    }
    mark_ready(i);
  }
}

void GradientReducer::learn_order() {
  // Rank 0's observation decides, so every rank builds the same buckets.
  std::vector<std::int64_t> order(observed_.begin(), observed_.end());
  order = detail::broadcast_values(comm_, order, 0);
  std::vector<std::size_t> permutation(order.begin(), order.end());
  install_buckets(permutation);
  order_learned_ = true;
}

void GradientReducer::reset_iteration() {
  ready_.assign(parameters_.size(), false);
  used_.assign(parameters_.size(), false);
  observed_.clear();
  next_to_start_ = 0;
  for (auto& bucket : buckets_) {
    bucket->pending = bucket->parameters.size();
    bucket->reduction.reset();
  }
}

std::vector<BucketLayout> GradientReducer::bucket_layout() const {
  std::vector<BucketLayout> layout;
  for (const auto& bucket : buckets_) layout.push_back({bucket->buffer.numel(), bucket->names});
  return layout;
}

}  // namespace loom::ddp
