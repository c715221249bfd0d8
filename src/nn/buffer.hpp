// Activation buffers of the layers: allocated on first use and reused by later steps of the same
// shape (a new shape, such as a shorter evaluation batch, reallocates).
#pragma once

#include <utility>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/error.hpp"
#include "loom/core/memory_category.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/model/parameter.hpp"

namespace loom::nn::detail {

// Buffers that activation checkpointing released, for the next layer of the same shape to take
// instead of allocating: the blocks of a checkpointed model run one at a time, so one block's
// worth of buffers serves them all. (Freeing and allocating them instead cost more than the
// recomputation on the CPU, where a large block goes back to the system and comes back
// page-faulted.) A model owns its pool and makes it current for its thread while it runs
// (PoolScope); layers reach it through ensure_buffer and release.
class BufferPool {
 public:
  void give(Tensor& t) {
    if (t.defined()) free_.push_back(std::move(t));
    t = Tensor();
  }
  // A pooled tensor of exactly (shape, dtype, device) that nothing else refers to, or undefined.
  Tensor take(const Shape& shape, DType dtype, Device device) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->shape() == shape && it->dtype() == dtype && it->device() == device && it->sole_owner()) {
        Tensor t = std::move(*it);
        free_.erase(it);
        return t;
      }
    }
    return Tensor();
  }

  // Drops every pooled buffer (a forward of another shape would never take them).
  void clear() noexcept { free_.clear(); }

 private:
  std::vector<Tensor> free_;
};

inline BufferPool*& current_pool() {
  thread_local BufferPool* pool = nullptr;
  return pool;
}

class PoolScope {
 public:
  explicit PoolScope(BufferPool* pool) : previous_(current_pool()) { current_pool() = pool; }
  ~PoolScope() { current_pool() = previous_; }
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  BufferPool* previous_;
};

// Drops a layer's buffer: into the current pool when there is one.
inline void release(Tensor& buffer) {
  if (BufferPool* pool = current_pool(); pool != nullptr) {
    pool->give(buffer);
  } else {
    buffer = Tensor();
  }
}

// buffer holds a tensor of exactly (shape, dtype, device) afterwards; its contents are undefined
// when it had to be (re)allocated.
inline const Tensor& ensure_buffer(Tensor& buffer, const Shape& shape, DType dtype, Device device) {
  if (!buffer.defined() || buffer.shape() != shape || buffer.dtype() != dtype || buffer.device() != device) {
    if (BufferPool* pool = current_pool(); pool != nullptr) {
      if (Tensor pooled = pool->take(shape, dtype, device); pooled.defined()) {
        buffer = std::move(pooled);
        return buffer;
      }
    }
    const MemoryCategoryScope memory(MemoryCategory::activations);
    buffer = Tensor::empty(shape, dtype, device);
  }
  return buffer;
}

// t on `device`: t itself when it is there, else a copy in `staging`, a buffer reused while the
// shape stays (no allocation per micro-batch for the tokens and targets a GPU model reads).
inline Tensor on_device(const Tensor& t, Tensor& staging, Device device, StreamRef stream) {
  if (t.device() == device) return t;
  ensure_buffer(staging, t.shape(), t.dtype(), device);
  copy(staging, t, stream);
  return staging;
}

// A layer's parameters are descriptions until a parameter space binds them, and under ZeRO their
// storage comes and goes with the unit hooks: a forward or backward without it is a named error
// pointing at the fix, not a stray read or an undefined GEMM operand.
inline void require_storage(const model::Parameter& p) {
  require(p.has_value(), "'", p.name(), "' has no storage: add the layer's parameters to a model's "
          "model::ParameterSpace; under ZeRO-3 a unit's values exist only between before_forward(u) and "
          "after_forward(u) (and before_backward/after_backward): does the model call them around this layer? "
          "(loom/model/model.hpp)");
}
inline void require_grad_storage(const model::Parameter& p) {
  require(p.has_grad(), "'", p.name(), "' has no gradient storage: under ZeRO-2 and 3 a unit's gradients exist only "
          "between before_backward(u) and after_backward(u): does the model call them around this layer's backward? "
          "(loom/model/model.hpp)");
}

// [d0, ..., dk, last] -> [d0 * ... * dk, last]
inline Tensor as_rows(const Tensor& t) {
  const std::int64_t last = t.shape()[-1];
  return t.view(Shape{t.numel() / last, last});
}

// shape with its last extent replaced by last.
inline Shape with_last(const Shape& shape, std::int64_t last) {
  std::vector<std::int64_t> extents = shape.extents();
  extents.back() = last;
  return Shape(std::move(extents));
}

}  // namespace loom::nn::detail
