#include <map>
#include <memory>
#include <mutex>

#include "loom/core/memory_category.hpp"
#include "loom/core/error.hpp"
#include "loom/ddp/comm_hook.hpp"
#include "loom/kernels/cast.hpp"

namespace loom::ddp {

CommHook average_hook() {
  return [](comm::Communicator& comm, const GradBucket& bucket) {
    return PendingReduction{comm.all_reduce(bucket.gradients, bucket.gradients, comm::ReduceOp::avg, bucket.stream), {}};
  };
}

namespace {

// One wire buffer per bucket, reused every step (buckets keep their sizes after the one rebuild).
class WireBuffers {
 public:
  explicit WireBuffers(DType wire) : wire_(wire) {}
  Tensor for_bucket(const GradBucket& bucket) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Tensor& buffer = buffers_[bucket.index];
    if (!buffer.defined() || buffer.numel() != bucket.gradients.numel() ||
        buffer.device() != bucket.gradients.device()) {
      const MemoryCategoryScope memory(MemoryCategory::communication);
      buffer = Tensor::empty(bucket.gradients.shape(), wire_, bucket.gradients.device());
    }
    return buffer;
  }

 private:
  DType wire_;
  std::mutex mutex_;
  std::map<int, Tensor> buffers_;
};

}  // namespace

CommHook compression_hook(DType wire) {
  require(wire == DType::f16 || wire == DType::bf16, "compression hook: the wire dtype must be f16 or bf16, got ",
          wire);
  auto buffers = std::make_shared<WireBuffers>(wire);
  return [buffers](comm::Communicator& comm, const GradBucket& bucket) {
    const Tensor compressed = buffers->for_bucket(bucket);
    kernels::CastOptions to_wire;
    to_wire.scale = 1.0f / static_cast<float>(comm.size());
    kernels::cast(bucket.gradients, compressed, to_wire, bucket.stream);
    PendingReduction pending;
    pending.work = comm.all_reduce(compressed, compressed, comm::ReduceOp::sum, bucket.stream);
    pending.finish = [compressed, gradients = bucket.gradients, stream = bucket.stream] {
      kernels::cast(compressed, gradients, {}, stream);
    };
    return pending;
  };
}

}  // namespace loom::ddp
