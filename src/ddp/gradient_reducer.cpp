#include "loom/ddp/gradient_reducer.hpp"

#include "loom/core/error.hpp"
#include "loom/ddp/replicas.hpp"

namespace loom::ddp {

namespace {

void validate(const comm::Communicator& comm, const model::ParameterSpace& space, const ReducerOptions& options) {
  require(space.device() == comm.device(), "gradient reducer: the parameters live on ", space.device(), " but the ",
          comm.backend(), " communicator on ", comm.device());
  require(options.bucket_bytes >= 0 && options.first_bucket_bytes >= 0, "gradient reducer: bucket sizes must be >= 0, "
          "got bucket_bytes ", options.bucket_bytes, " and first_bucket_bytes ", options.first_bucket_bytes);
  require(space.value_mode() == model::ValueMode::full, "gradient reducer: the model's values are sharded (ZeRO-3's "
          "layout), but data parallelism keeps every value on every rank; build the model with "
          "shard::space_layout(0, communicator), or train it with ZeRO-3");
}

// What must match on every rank besides the parameters (a different bucket plan would pair
// unrelated gradients, a different mode a different number of collectives).
std::string describe(const ReducerOptions& o) {
  return loom::detail::concat("bucket_bytes ", o.bucket_bytes, ", first_bucket_bytes ", o.first_bucket_bytes,
                              ", unused_parameters ",
                              o.unused_parameters == UnusedParameters::error ? "error" : "reduce_zero",
                              ", broadcast_parameters ", o.broadcast_parameters);
}

}  // namespace

GradientReducer::GradientReducer(comm::Communicator& comm, model::ParameterSpace& space, ReducerOptions options)
    : comm_(comm), space_(space), options_(std::move(options)), average_(average_hook()) {
  std::exception_ptr invalid;
  try {
    validate(comm_, space_, options_);
    space_.allocate_grads();  // a model built in ZeRO-2's layout has none yet
  } catch (...) {
    invalid = std::current_exception();
  }
  make_replicas(comm_, space_, invalid, "gradient reducer", describe(options_), options_.broadcast_parameters);
  if (!options_.hook) options_.hook = average_;
  scheduler_ = std::make_unique<BucketScheduler>(
      comm_, space_, buckets_by_size(space_, options_.bucket_bytes, options_.first_bucket_bytes),
      static_cast<BucketCollective&>(*this),
      options_.unused_parameters);
}

// The scheduler goes first: it waits for what is in flight, which may still call the hook.
GradientReducer::~GradientReducer() { scheduler_.reset(); }

PendingReduction GradientReducer::start(const ScheduledBucket& bucket, StreamRef stream) {
  const GradBucket view{bucket.index, space_.grads().slice(bucket.begin, bucket.end), bucket.names, stream,
                        bucket.begin};
  return options_.hook(comm_, view);
}

PendingReduction GradientReducer::stand_in(const ScheduledBucket& bucket, StreamRef stream) {
  const GradBucket view{bucket.index, space_.grads().slice(bucket.begin, bucket.end), bucket.names, stream,
                        bucket.begin};
  return average_(comm_, view);
}

}  // namespace loom::ddp
