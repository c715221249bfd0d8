// Activation buffers of the layers: allocated on first use and reused by later steps of the same
// shape (a new shape, such as a shorter evaluation batch, reallocates).
#pragma once

#include <utility>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/model/parameter.hpp"

namespace loom::nn::detail {

// buffer holds a tensor of exactly (shape, dtype, device) afterwards; its contents are undefined
// when it had to be (re)allocated.
inline const Tensor& ensure_buffer(Tensor& buffer, const Shape& shape, DType dtype, Device device) {
  if (!buffer.defined() || buffer.shape() != shape || buffer.dtype() != dtype || buffer.device() != device) {
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

// A layer's parameters are descriptions until a parameter space binds them (and, under ZeRO-3,
// until their unit is gathered): a forward without storage is a named error, not a stray read.
inline void require_storage(const model::Parameter& p) {
  require(p.has_value(), "'", p.name(), "' has no storage: add the layer's parameters to a model's "
          "model::ParameterSpace (under ZeRO-3, run the model with its engine, which gathers each unit)");
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
