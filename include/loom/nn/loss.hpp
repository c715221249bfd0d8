// Standard losses for models that are not GPT, on the CPU or a GPU. Each keeps what its backward
// needs and returns the gradient with respect to its input already multiplied by loss_scale, which
// is what model::Model::backward(loss_scale) asks of a model:
//
//   float forward(...)  {  ...; return loss_.forward(y, targets, stream);  }
//   void backward(float loss_scale, StreamRef stream) {  Tensor d = loss_.backward(loss_scale, stream);  ...  }
//
// forward() waits for the loss; forward_into() adds it to a [1] f32 device sum in stream order
// without waiting (model::Model::forward_into). Sums are taken in double and rounded once, so the
// loss does not depend on the device.
#pragma once

#include <cstdint>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::nn {

// Mean squared error: the mean over every element of (prediction - target)^2.
// predictions: any shape, f32, f16 or bf16, on the model's device; targets: the same shape, f32 (on
// any device: copied to the predictions' device in a buffer kept between steps).
class MseLoss {
 public:
  float forward(const Tensor& predictions, const Tensor& targets, StreamRef stream = {});
  void forward_into(const Tensor& predictions, const Tensor& targets, const Tensor& loss_sum, StreamRef stream = {});
  // loss_scale x d(loss)/d(predictions) = loss_scale x 2 (prediction - target) / n, in the
  // predictions' dtype and shape: a buffer of this loss, valid until the next backward. Needs a
  // forward first (each forward allows one backward).
  Tensor backward(float loss_scale = 1.0f, StreamRef stream = {});

 private:
  Tensor staged_targets_, negated_, difference_, squares_, gradient_, value_;
  Shape shape_;
  DType dtype_ = DType::f32;
  bool ready_ = false;
};

// Softmax cross-entropy for classification: the mean over rows whose target is not ignore_index of
// logsumexp(logits[r]) - logits[r, target[r]]. logits: [rows, classes], f32, f16 or bf16, on the
// model's device; targets: [rows] i32 class indices in [0, classes) or ignore_index (any device).
// A target out of range is an Error naming it.
class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(std::int64_t ignore_index = -1) : ignore_index_(ignore_index) {}
  float forward(const Tensor& logits, const Tensor& targets, StreamRef stream = {});
  void forward_into(const Tensor& logits, const Tensor& targets, const Tensor& loss_sum, StreamRef stream = {});
  // loss_scale x d(loss)/d(logits): [rows, classes] in the logits' dtype, valid until the next
  // backward; ignored rows get 0.
  Tensor backward(float loss_scale = 1.0f, StreamRef stream = {});
  // Rows of the last forward that counted (targets other than ignore_index).
  std::int64_t counted_rows() const noexcept { return counted_; }

 private:
  std::int64_t ignore_index_;
  Tensor logits_, targets_, staged_targets_, losses_, dlosses_, gradient_, value_;
  std::int64_t counted_ = 0;
  bool ready_ = false;
};

}  // namespace loom::nn
