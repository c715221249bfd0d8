#include "loom/shard/zero.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/kernels/elementwise.hpp"

namespace loom::shard {

namespace {

// Full-unit gradient buffers the pool may hold before backward waits for the oldest reduction to
// free one: the embeddings' (bound for all of a GPT's backward, since its head and its embedding
// bracket the blocks) and two blocks', one computing while the other is reduced. Buffers have
// their unit's size (a block's buffer is reused by the next block), not the largest unit's.
constexpr std::size_t pool_limit = 3;

void validate(const comm::Communicator& comm, const model::ParameterSpace& space, int stage,
              const ddp::ReducerOptions& options) {
  require(stage == 1 || stage == 2, "ZeRO: the stage must be 1 or 2, got ", stage, " (stage 0 is plain data "
          "parallelism: ddp::GradientReducer)");
  require(!options.hook, "ZeRO: communication hooks (compression) apply to DDP's all-reduce; ZeRO reduce-scatters "
          "f32 gradients unit by unit");
  require(space.device() == comm.device(), "ZeRO: the parameters live on ", space.device(), " but the ",
          comm.backend(), " communicator on ", comm.device());
}

// What must match on every rank besides the parameters: the stage decides which collectives run.
std::string describe(int stage, const ddp::ReducerOptions& o) {
  return loom::detail::concat("ZeRO stage ", stage, ", unused_parameters ",
                              o.unused_parameters == ddp::UnusedParameters::error ? "error" : "reduce_zero",
                              ", broadcast_parameters ", o.broadcast_parameters);
}

}  // namespace

ZeroEngine::ZeroEngine(comm::Communicator& comm, model::Model& model, int stage, ddp::ReducerOptions reducer_options)
    : comm_(comm), model_(model), space_(model.parameter_space()), stage_(stage) {
  std::exception_ptr invalid;
  try {
    validate(comm_, space_, stage_, reducer_options);
  } catch (...) {
    invalid = std::current_exception();
  }
  ddp::make_replicas(comm_, space_, invalid, "ZeRO", describe(stage_, reducer_options),
                     reducer_options.broadcast_parameters);  // lays the space out for comm.size()
  scheduler_ = std::make_unique<ddp::BucketScheduler>(comm_, space_, ddp::buckets_by_unit(space_),
                                                      static_cast<ddp::BucketCollective&>(*this),
                                                      reducer_options.unused_parameters);
  ranges_ = space_.shard(comm_.rank());
  started_.assign(space_.units().size(), false);
  if (stage_ != 2) return;
  std::exception_ptr failure;
  try {
    shard_grads_ = Tensor::zeros({space_.shard_elements()}, DType::f32, space_.device());
  } catch (...) {
    failure = std::current_exception();
  }
  comm::throw_if_any_failed(comm_, failure, "ZeRO-2: allocating the gradient shard");
  space_.release_grads();
  bound_buffers_.assign(space_.units().size(), Tensor());
  model_.set_unit_hooks({{}, [this](std::size_t unit, StreamRef stream) { bind_buffer(unit, stream); }});
}

ZeroEngine::~ZeroEngine() {
  scheduler_.reset();  // waits for what is in flight, whose finish steps use the pool
  if (stage_ != 2) return;
  model_.set_unit_hooks({});
  release_all_buffers();
  try {
    space_.allocate_grads();  // the model stays usable without the engine
  } catch (...) {  // out of memory: the gradients stay released; a later backward reports it
  }
}

std::vector<model::ShardRange> ZeroEngine::ranges() const { return ranges_; }

void ZeroEngine::attach(optim::Optimizer& optimizer) const {
  require(optimizer.local_elements() == space_.shard_elements() && optimizer.ranges().size() == ranges_.size(),
          "ZeRO: the optimizer must be built over ZeroEngine::ranges() (", space_.shard_elements(),
          " elements), it holds ", optimizer.local_elements());
  if (stage_ == 2) optimizer.read_gradients_from(shard_grads_);
}

Tensor ZeroEngine::unit_gradients(std::size_t unit) const {
  const model::Unit& u = space_.units()[unit];
  if (space_.grads_allocated()) return space_.grads().slice(u.begin, u.begin + u.elements);
  // Released gradients (ZeRO-2): the unit's are the pool buffer bound to it.
  const Tensor& bound = space_.bound_unit_grads(unit);
  require(bound.defined(), "ZeRO-2: unit '", u.name, "' has no gradient buffer to reduce");
  return bound;
}

ddp::PendingReduction ZeroEngine::start(const ddp::ScheduledBucket& bucket, StreamRef stream) {
  const auto at = static_cast<std::size_t>(
      std::find_if(ranges_.begin(), ranges_.end(), [&](const model::ShardRange& r) { return r.unit == bucket.unit; }) -
      ranges_.begin());
  require(at < ranges_.size(), "ZeRO: bucket ", bucket.index, " (unit ", bucket.unit, ") has no shard on this rank");
  started_[bucket.unit] = true;
  const Tensor gradients = unit_gradients(bucket.unit);
  const std::int64_t n = gradients.numel() / comm_.size();
  const Tensor mine = gradients.slice(comm_.rank() * n, (comm_.rank() + 1) * n);
  comm::Work work = comm_.reduce_scatter(gradients, mine, comm::ReduceOp::avg, stream);  // in place
  if (stage_ == 1) return ddp::PendingReduction{std::move(work), {}};
  const Tensor into = shard_grads_.slice(ranges_[at].local, ranges_[at].local + n);
  return ddp::PendingReduction{std::move(work), [this, unit = bucket.unit, mine, into, stream] {
                                 kernels::residual_add(into, mine, into, stream);
                                 release_buffer(unit);
                               }};
}

ddp::PendingReduction ZeroEngine::stand_in(const ddp::ScheduledBucket& bucket, StreamRef stream) {
  // The plain reduce-scatter start() would have issued, on zeros if the unit has no buffer.
  Tensor gradients;
  try {
    gradients = unit_gradients(bucket.unit);
  } catch (...) {
    gradients = Tensor::zeros({bucket.end - bucket.begin}, DType::f32, comm_.device());
  }
  const std::int64_t n = gradients.numel() / comm_.size();
  return ddp::PendingReduction{comm_.reduce_scatter(gradients, gradients.slice(comm_.rank() * n, (comm_.rank() + 1) * n),
                                                    comm::ReduceOp::avg, stream),
                               {}};
}

void ZeroEngine::bind_buffer(std::size_t unit, StreamRef stream) {
  if (bound_buffers_[unit].defined()) return;
  const std::int64_t needed = space_.units()[unit].elements;
  // The smallest free buffer that fits; when none does and the pool is full, the oldest reduction
  // in flight is finished (its buffer comes back) before another is allocated.
  auto best_fit = [&] {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->numel() >= needed && (best == free_.end() || it->numel() < best->numel())) best = it;
    }
    return best;
  };
  auto fit = best_fit();
  while (fit == free_.end() && pool_allocated_ >= pool_limit && scheduler_->complete_oldest()) fit = best_fit();
  Tensor buffer;
  if (fit != free_.end()) {
    buffer = std::move(*fit);
    free_.erase(fit);
  } else {
    buffer = Tensor::empty({needed}, DType::f32, space_.device());
    ++pool_allocated_;
    pool_bytes_ += static_cast<std::int64_t>(buffer.nbytes());
  }
  const Tensor view = buffer.slice(0, needed);
  fill(view, 0.0, stream);
  space_.bind_unit_grads(unit, view);
  bound_buffers_[unit] = std::move(buffer);
}

void ZeroEngine::release_buffer(std::size_t unit) {
  if (!bound_buffers_[unit].defined()) return;
  space_.bind_unit_grads(unit, Tensor());
  free_.push_back(std::move(bound_buffers_[unit]));
  bound_buffers_[unit] = Tensor();
}

void ZeroEngine::release_all_buffers() noexcept {
  if (stage_ != 2) return;
  for (std::size_t u = 0; u < space_.units().size(); ++u) {
    try {
      release_buffer(u);
    } catch (...) {
    }
  }
}

void ZeroEngine::begin_step(StreamRef stream) {
  started_.assign(started_.size(), false);
  if (stage_ == 1) {
    space_.zero_grads(stream);
    return;
  }
  release_all_buffers();
  fill(shard_grads_, 0.0, stream);
}

ddp::NoSync ZeroEngine::no_sync() {
  require(stage_ == 1, "ZeRO-2 reduces every micro-batch as its backward runs: call synchronize() after each "
          "micro-batch instead of no_sync()");
  return scheduler_->no_sync();
}

ddp::NoSync ZeroEngine::micro_batch(bool last) { return last || stage_ == 2 ? ddp::NoSync() : no_sync(); }

void ZeroEngine::after_backward(bool last, StreamRef stream) {
  if (last || stage_ == 2) synchronize(stream);
}

void ZeroEngine::synchronize(StreamRef stream) {
  std::exception_ptr failure;
  try {
    // Units whose reduction has not started (their backward never ran) are reduced as zeros (or
    // reported unused): every rank issues the same collectives.
    if (stage_ == 2) {
      for (std::size_t u = 0; u < space_.units().size(); ++u) {
        if (!started_[u]) bind_buffer(u, stream);
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  try {
    scheduler_->synchronize(stream);
  } catch (...) {
    release_all_buffers();
    started_.assign(started_.size(), false);
    throw;
  }
  release_all_buffers();
  started_.assign(started_.size(), false);
  if (failure) std::rethrow_exception(failure);
}

void ZeroEngine::abandon_iteration() noexcept {
  scheduler_->abandon_iteration();
  release_all_buffers();
  started_.assign(started_.size(), false);
}

void ZeroEngine::gather_values(StreamRef stream) {
  std::vector<comm::Work> works;
  for (const model::ShardRange& range : ranges_) {
    works.push_back(
        comm_.all_gather(space_.values().slice(range.begin, range.end), space_.unit_values(range.unit), stream));
  }
  for (const comm::Work& work : works) work.wait();
}

}  // namespace loom::shard
