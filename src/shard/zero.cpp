#include "loom/shard/zero.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "loom/core/memory_category.hpp"
#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/kernels/elementwise.hpp"
#include "src/shard/gathered_units.hpp"

namespace loom::shard {

namespace {

// Full-unit gradient buffers the pool may hold before backward waits for the oldest reduction to
// free one: the embeddings' (bound for all of a GPT's backward, since its head and its embedding
// bracket the blocks) and two blocks', one computing while the other is reduced. Buffers have
// their unit's size (a block's buffer is reused by the next block), not the largest unit's.
constexpr std::size_t pool_limit = 3;

void validate(const comm::Communicator& comm, const model::Model& model, int stage, const ddp::ReducerOptions& options,
              const ZeroOptions& zero) {
  const model::ParameterSpace& space = model.parameter_space();
  require(stage >= 1 && stage <= 3, "ZeRO: the stage must be 1, 2 or 3, got ", stage, " (stage 0 is plain data "
          "parallelism: ddp::GradientReducer)");
  require(zero.reduction == DType::f32 || zero.reduction == DType::bf16, "ZeRO: the reduce-scatter runs in f32 or "
          "bf16, got ", zero.reduction);
  require(zero.reduction == DType::f32 || stage >= 2, "ZeRO-1 reduce-scatters the fp32 gradient buffer in place; a "
          "bf16 reduction needs stage 2 or 3");
  require(stage == 3 || (!zero.keep_gathered_for_backward && !zero.keep_gathered_across_micro_batches),
          "ZeRO: keeping values gathered applies to stage 3 only (stages 1 and 2 keep every value)");
  require(space.claimed_by().empty(), "ZeRO: the model's values are sharded already (", space.claimed_by(),
          " holds them)");
  require(space.grads_allocated() || space.ranks() == comm.size(), "ZeRO: the model was built for ", space.ranks(),
          " ranks without a gradient buffer (shard::space_layout), but the communicator has ", comm.size(),
          " ranks; build it with shard::space_layout(", stage, ", communicator)");
  if (space.value_mode() == model::ValueMode::sharded) {
    // Built in ZeRO-3's layout (shard::space_layout), or left sharded by an engine that is gone.
    require(stage == 3, "ZeRO: the model's values are sharded (ZeRO-3's layout) but stage ", stage, " keeps every "
            "value on every rank; build the model with shard::space_layout(", stage, ", communicator)");
    require(space.ranks() == comm.size() && space.value_rank() == comm.rank(), "ZeRO: the model's values are "
            "sharded as rank ", space.value_rank(), " of ", space.ranks(), ", but this rank is rank ", comm.rank(),
            " of ", comm.size(), " of the communicator");
  }
  for (const std::size_t root : model.root_units()) {
    require(root < space.units().size(), "ZeRO: the model names root unit ", root, " but has ", space.units().size(),
            " units");
  }
  require(!options.hook, "ZeRO: communication hooks (compression) apply to DDP's all-reduce; ZeRO reduce-scatters "
          "f32 gradients unit by unit");
  require(space.device() == comm.device(), "ZeRO: the parameters live on ", space.device(), " but the ",
          comm.backend(), " communicator on ", comm.device());
}

// What must match on every rank besides the parameters: the stage decides which collectives run.
std::string describe(int stage, const ddp::ReducerOptions& o, const ZeroOptions& z) {
  return loom::detail::concat("ZeRO stage ", stage, ", unused_parameters ",
                              o.unused_parameters == ddp::UnusedParameters::error ? "error" : "reduce_zero",
                              ", broadcast_parameters ", o.broadcast_parameters, ", reduction ", z.reduction,
                              ", keep gathered for backward ", z.keep_gathered_for_backward, ", across micro-batches ",
                              z.keep_gathered_across_micro_batches);
}

}  // namespace

ZeroEngine::ZeroEngine(comm::Communicator& comm, model::Model& model, int stage, ddp::ReducerOptions reducer_options,
                       ZeroOptions options)
    : comm_(comm), model_(model), space_(model.parameter_space()), stage_(stage), options_(options) {
  std::exception_ptr invalid;
  try {
    validate(comm_, model_, stage_, reducer_options, options_);
    if (stage_ == 1) space_.allocate_grads();  // a model built in ZeRO-2/3's layout has none yet
  } catch (...) {
    invalid = std::current_exception();
  }
  ddp::make_replicas(comm_, space_, invalid, "ZeRO", describe(stage_, reducer_options, options_),
                     reducer_options.broadcast_parameters);  // lays the space out for comm.size()
  scheduler_ = std::make_unique<ddp::BucketScheduler>(comm_, space_, ddp::buckets_by_unit(space_),
                                                      static_cast<ddp::BucketCollective&>(*this),
                                                      reducer_options.unused_parameters);
  ranges_ = space_.shard(comm_.rank());
  started_.assign(space_.units().size(), false);
  root_.assign(space_.units().size(), false);
  for (const std::size_t root : model_.root_units()) root_[root] = true;
  if (stage_ == 1) return;
  std::exception_ptr failure;
  Tensor value_shard;
  try {
    {
      const MemoryCategoryScope memory(MemoryCategory::gradients);
      shard_grads_ = Tensor::zeros({space_.shard_elements()}, DType::f32, space_.device());
    }
    if (stage_ == 3 && !values_sharded()) {
      const MemoryCategoryScope memory(MemoryCategory::parameters);
      value_shard = Tensor::empty({space_.shard_elements()}, space_.storage(), space_.device());
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // Nothing of the model changes before every rank has what it needs: a failure anywhere leaves
  // every rank's model whole.
  comm::throw_if_any_failed(comm_, failure, "ZeRO: allocating the shards");
  if (stage_ == 3) {
    if (!values_sharded()) space_.shard_values(comm_.rank(), value_shard);
    gathered_ = std::make_unique<detail::GatheredUnits>(comm_, space_);
  }
  space_.release_grads();
  bound_buffers_.assign(space_.units().size(), Tensor());
  hooks_ = model_.add_unit_hooks({[this](std::size_t unit, StreamRef stream) { before_forward(unit, stream); },
                                  [this](std::size_t unit, StreamRef) { after_forward(unit); },
                                  [this](std::size_t unit, StreamRef stream) { before_backward(unit, stream); },
                                  [this](std::size_t unit, StreamRef) { after_backward(unit); }});
  if (stage_ == 3) space_.claim("a ZeRO-3 engine");  // last: nothing after it throws, so it always ends
}

ZeroEngine::~ZeroEngine() {
  scheduler_.reset();  // waits for what is in flight, whose finish steps use the pool
  if (stage_ == 1) return;
  model_.remove_unit_hooks(hooks_);
  release_all_buffers();
  gathered_.reset();  // unbinds every gathered unit; the space keeps its slices
  space_.end_claim();
  // Full values stay usable without the engine: their gradients come back. Sharded ones need an
  // engine anyway (the next one binds what it needs): a model built to hold only its share never
  // gets a full gradient buffer here.
  if (space_.value_mode() == model::ValueMode::sharded) return;
  try {
    space_.allocate_grads();
  } catch (...) {  // out of memory: the gradients stay released; a later backward reports it
  }
}

bool ZeroEngine::values_sharded() const noexcept {
  return stage_ == 3 && space_.value_mode() == model::ValueMode::sharded;
}

bool ZeroEngine::is_root(std::size_t unit) const { return root_.at(unit); }

std::size_t ZeroEngine::next_forward(std::size_t unit) const {
  for (std::size_t u = unit + 1; u < root_.size(); ++u) {
    if (!root_[u]) return u;
  }
  return root_.size();
}

std::size_t ZeroEngine::next_backward(std::size_t unit) const {
  for (std::size_t u = is_root(unit) ? root_.size() : unit; u-- > 0;) {
    if (!root_[u]) return u;
  }
  return root_.size();
}

void ZeroEngine::before_forward(std::size_t unit, StreamRef stream) {
  if (!values_sharded()) return;
  gathered_->require(unit, stream);
  if (const std::size_t next = next_forward(unit); next < root_.size()) gathered_->prefetch(next, stream);
}

void ZeroEngine::after_forward(std::size_t unit) {
  if (!values_sharded() || is_root(unit)) return;
  if (options_.keep_gathered_for_backward || options_.keep_gathered_across_micro_batches) return;
  if (next_forward(unit) == root_.size()) return;  // the last unit of forward is the first of backward
  gathered_->release(unit);
}

void ZeroEngine::before_backward(std::size_t unit, StreamRef stream) {
  bind_buffer(unit, stream);
  if (!values_sharded()) return;
  gathered_->require(unit, stream);
  if (const std::size_t next = next_backward(unit); next < root_.size()) gathered_->prefetch(next, stream);
}

void ZeroEngine::after_backward(std::size_t unit) {
  if (!values_sharded()) return;
  if (options_.keep_gathered_across_micro_batches && !last_micro_batch_) return;
  gathered_->release(unit);
}

void ZeroEngine::unshard_values(StreamRef stream) {
  require(stage_ == 3, "ZeRO: unshard_values() applies to stage 3 (stages 1 and 2 keep every value)");
  if (!values_sharded()) return;
  gathered_->release_all();
  std::exception_ptr failure;
  Tensor full;
  try {
    const MemoryCategoryScope memory(MemoryCategory::parameters);
    full = Tensor::zeros({space_.elements()}, space_.storage(), space_.device());
  } catch (...) {
    failure = std::current_exception();
  }
  comm::throw_if_any_failed(comm_, failure, "ZeRO-3: allocating the full values");
  std::vector<comm::Work> works;
  for (const model::ShardRange& range : ranges_) {
    const model::Unit& u = space_.units()[range.unit];
    works.push_back(comm_.all_gather(space_.unit_slice_values(range.unit, comm_.rank()),
                                     full.slice(u.begin, u.begin + u.elements), stream));
  }
  for (const comm::Work& work : works) work.wait();
  loom::synchronize(stream);  // the stream's work, not the engine's synchronize()
  space_.unshard_values(full);
}

void ZeroEngine::values_changed() noexcept {
  if (gathered_) gathered_->release_all();
}

GatherReport ZeroEngine::gather_report() const noexcept {
  if (!gathered_) return {};
  const detail::GatherStats& s = gathered_->stats();
  return {s.gathers, s.prefetched, s.ready, gathered_->buffers(), gathered_->peak_live(), gathered_->buffer_bytes()};
}

void ZeroEngine::reset_gather_report() noexcept {
  if (gathered_) gathered_->reset_stats();
}

std::vector<model::ShardRange> ZeroEngine::ranges() const { return ranges_; }

void ZeroEngine::attach(optim::Optimizer& optimizer) const {
  require(optimizer.local_elements() == space_.shard_elements() && optimizer.ranges().size() == ranges_.size(),
          "ZeRO: the optimizer must be built over ZeroEngine::ranges() (", space_.shard_elements(),
          " elements), it holds ", optimizer.local_elements());
  if (stage_ >= 2) optimizer.read_gradients_from(shard_grads_);
}

Tensor ZeroEngine::unit_gradients(std::size_t unit) const {
  const model::Unit& u = space_.units()[unit];
  if (space_.grads_allocated()) return space_.grads().slice(u.begin, u.begin + u.elements);
  // Released gradients (ZeRO-2, 3): the unit's are the pool buffer bound to it.
  const Tensor& bound = space_.bound_unit_grads(unit);
  require(bound.defined(), "ZeRO: unit '", u.name, "' has no gradient buffer to reduce");
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
  const Tensor into = stage_ >= 2 ? shard_grads_.slice(ranges_[at].local, ranges_[at].local + n) : Tensor();
  if (options_.reduction == DType::bf16) {
    // Half the bytes on the wire; the average of this rank's slice comes back to f32 in `mine` (the
    // unit's f32 buffer is free by then) and is added into the fp32 shard.
    // The bf16 copy lives until its finish step has used it, not until synchronize(): held here
    // and dropped by the finish, so at most the units in flight have one.
    const MemoryCategoryScope memory(MemoryCategory::communication);
    auto compact = std::make_shared<Tensor>(Tensor::empty({gradients.numel()}, DType::bf16, gradients.device()));
    kernels::cast(gradients, *compact, {}, stream);
    comm::Work work = comm_.reduce_scatter(*compact, compact->slice(comm_.rank() * n, (comm_.rank() + 1) * n),
                                           comm::ReduceOp::avg, stream);
    return ddp::PendingReduction{std::move(work), [this, unit = bucket.unit, compact, n, mine, into, stream] {
                                   kernels::cast(compact->slice(comm_.rank() * n, (comm_.rank() + 1) * n), mine, {},
                                                 stream);
                                   kernels::residual_add(into, mine, into, stream);
                                   *compact = Tensor();
                                   release_buffer(unit);
                                 }};
  }
  comm::Work work = comm_.reduce_scatter(gradients, mine, comm::ReduceOp::avg, stream);  // in place
  if (stage_ == 1) return ddp::PendingReduction{std::move(work), {}};
  return ddp::PendingReduction{std::move(work), [this, unit = bucket.unit, mine, into, stream] {
                                 kernels::residual_add(into, mine, into, stream);
                                 release_buffer(unit);
                               }};
}

ddp::PendingReduction ZeroEngine::stand_in(const ddp::ScheduledBucket& bucket, StreamRef stream) {
  // The plain reduce-scatter start() would have issued, on zeros if the unit has no buffer.
  Tensor gradients;
  try {
    gradients = options_.reduction == DType::f32 ? unit_gradients(bucket.unit) : Tensor();
  } catch (...) {
  }
  if (!gradients.defined()) {
    const MemoryCategoryScope memory(MemoryCategory::communication);
    gradients = Tensor::zeros({bucket.end - bucket.begin}, options_.reduction, comm_.device());
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
  while (fit == free_.end() && pool_allocated_ >= pool_limit && scheduler_->complete_oldest(stream)) fit = best_fit();
  Tensor buffer;
  if (fit != free_.end()) {
    buffer = std::move(*fit);
    free_.erase(fit);
  } else {
    const MemoryCategoryScope memory(MemoryCategory::gradients);  // (a unit's gradients while its backward runs)
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
  if (stage_ == 1) return;
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
  if (stage_ == 3) {
    if (gathered_) gathered_->release_all();  // left from a forward-only use
    if (!values_sharded()) space_.shard_values(comm_.rank());  // after unshard_values()
  }
  fill(shard_grads_, 0.0, stream);
}

ddp::NoSync ZeroEngine::no_sync() {
  require(stage_ == 1, "ZeRO-", stage_, " reduces every micro-batch as its backward runs: call synchronize() after "
          "each micro-batch instead of no_sync()");
  return scheduler_->no_sync();
}

ddp::NoSync ZeroEngine::micro_batch(bool last) {
  last_micro_batch_ = last;
  return last || stage_ >= 2 ? ddp::NoSync() : no_sync();
}

void ZeroEngine::after_backward(bool last, StreamRef stream) {
  if (last || stage_ >= 2) synchronize(stream);
}

void ZeroEngine::synchronize(StreamRef stream) {
  std::exception_ptr failure;
  try {
    // Units whose reduction has not started (their backward never ran) are reduced as zeros (or
    // reported unused): every rank issues the same collectives.
    if (stage_ >= 2) {
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
  if (gathered_) gathered_->release_all();
  last_micro_batch_ = true;
  started_.assign(started_.size(), false);
}

void ZeroEngine::gather_values(StreamRef stream) {
  if (stage_ == 3) {
    if (gathered_) gathered_->release_all();  // their values are the old ones
    return;
  }
  std::vector<comm::Work> works;
  for (const model::ShardRange& range : ranges_) {
    works.push_back(
        comm_.all_gather(space_.values().slice(range.begin, range.end), space_.unit_values(range.unit), stream));
  }
  for (const comm::Work& work : works) work.wait();
}

model::SpaceLayout space_layout(int stage, const comm::Communicator* data_group) {
  require(stage >= 0 && stage <= 3, "ZeRO: the stage must be 0 (DDP), 1, 2 or 3, got ", stage);
  require(stage == 0 || data_group != nullptr, "ZeRO: stage ", stage, " shards over a communicator; none was given");
  model::SpaceLayout layout;
  if (data_group == nullptr) return layout;
  layout.ranks = data_group->size();
  layout.rank = data_group->rank();
  layout.values = stage == 3 ? model::ValueMode::sharded : model::ValueMode::full;
  layout.grads = stage < 2;
  return layout;
}

}  // namespace loom::shard
