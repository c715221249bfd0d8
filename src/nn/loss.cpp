#include "loom/nn/loss.hpp"

#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/grad_utils.hpp"
#include "src/nn/buffer.hpp"
#include "src/nn/loss_value.hpp"

namespace loom::nn {

namespace {

bool floating(DType dtype) { return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16; }

}  // namespace

float MseLoss::forward(const Tensor& predictions, const Tensor& targets, StreamRef stream) {
  return detail::loss_value(*this, value_, predictions, targets, stream);
}

void MseLoss::forward_into(const Tensor& predictions, const Tensor& targets, const Tensor& loss_sum,
                           StreamRef stream) {
  require(predictions.defined() && floating(predictions.dtype()),
          "MSE loss: predictions must be an f32, f16 or bf16 tensor, got ", predictions);
  require(targets.defined() && targets.dtype() == DType::f32 && targets.shape() == predictions.shape(),
          "MSE loss: targets must be f32 of the predictions' shape ", predictions.shape(), ", got ", targets);
  require(predictions.numel() > 0, "MSE loss: the batch is empty");
  const Device device = predictions.device();
  const Tensor t = detail::on_device(targets, staged_targets_, device, stream);
  // difference = prediction - target in f32: -target by a scaled cast, then one add (the prediction
  // is widened by the same cast when it is 16-bit).
  const Shape rows{predictions.numel()};
  detail::ensure_buffer(negated_, rows, DType::f32, device);
  kernels::CastOptions negate;
  negate.scale = -1.0f;
  kernels::cast(t, negated_, negate, stream);
  detail::ensure_buffer(difference_, rows, DType::f32, device);
  if (predictions.dtype() == DType::f32) {
    kernels::residual_add(predictions.view(rows), negated_, difference_, stream);
  } else {
    kernels::cast(predictions, difference_, {}, stream);
    kernels::residual_add(difference_, negated_, difference_, stream);
  }
  detail::ensure_buffer(squares_, {1}, DType::f32, device);
  kernels::sum_of_squares(std::span<const Tensor>(&difference_, 1), squares_, stream);
  kernels::accumulate_mean(squares_, static_cast<double>(predictions.numel()), loss_sum, stream);
  shape_ = predictions.shape();
  dtype_ = predictions.dtype();
  ready_ = true;
}

Tensor MseLoss::backward(float loss_scale, StreamRef stream) {
  require(ready_, "MSE loss: backward needs a forward first (each forward allows one backward)");
  ready_ = false;
  detail::ensure_buffer(gradient_, shape_, dtype_, difference_.device());
  kernels::CastOptions scale;
  scale.scale = static_cast<float>(2.0 * loss_scale / static_cast<double>(difference_.numel()));
  kernels::cast(difference_, gradient_, scale, stream);
  return gradient_;
}

float CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets, StreamRef stream) {
  return detail::loss_value(*this, value_, logits, targets, stream);
}

void CrossEntropyLoss::forward_into(const Tensor& logits, const Tensor& targets, const Tensor& loss_sum,
                                    StreamRef stream) {
  require(logits.defined() && floating(logits.dtype()) && logits.rank() == 2 && logits.shape()[0] > 0,
          "cross-entropy loss: logits must be [rows, classes] f32, f16 or bf16 with rows > 0, got ", logits);
  require(targets.defined() && targets.dtype() == DType::i32 && targets.shape() == Shape{logits.shape()[0]},
          "cross-entropy loss: targets must be [", logits.shape()[0], "] i32 class indices, got ", targets);
  const std::int64_t classes = logits.shape()[1];
  // The host's targets are checked here, naming the row; a device batch is checked by the kernel.
  const std::vector<std::int32_t> host = targets.to_vector<std::int32_t>();
  counted_ = 0;
  for (std::size_t r = 0; r < host.size(); ++r) {
    if (host[r] == ignore_index_) continue;
    require(host[r] >= 0 && host[r] < classes, "cross-entropy loss: the target of row ", r, " is ", host[r],
            ", outside the classes [0, ", classes, ") (and not the ignore_index ", ignore_index_, ")");
    ++counted_;
  }
  const Device device = logits.device();
  targets_ = detail::on_device(targets, staged_targets_, device, stream);
  logits_ = logits;
  detail::ensure_buffer(losses_, {logits.shape()[0]}, DType::f32, device);
  kernels::CrossEntropyOptions options;
  options.ignore_index = ignore_index_;
  kernels::cross_entropy_forward(logits_, targets_, losses_, options, stream);
  // Ignored rows hold loss 0: the mean over counted rows (none counted: a loss of 0).
  kernels::accumulate_mean(losses_, counted_ > 0 ? static_cast<double>(counted_) : 1.0, loss_sum, stream);
  ready_ = true;
}

Tensor CrossEntropyLoss::backward(float loss_scale, StreamRef stream) {
  require(ready_, "cross-entropy loss: backward needs a forward first (each forward allows one backward)");
  ready_ = false;
  const Device device = logits_.device();
  detail::ensure_buffer(dlosses_, {logits_.shape()[0]}, DType::f32, device);
  fill(dlosses_, counted_ > 0 ? static_cast<double>(loss_scale) / static_cast<double>(counted_) : 0.0, stream);
  detail::ensure_buffer(gradient_, logits_.shape(), logits_.dtype(), device);
  kernels::CrossEntropyOptions options;
  options.ignore_index = ignore_index_;
  kernels::cross_entropy_backward(logits_, targets_, dlosses_, gradient_, options, stream);
  logits_ = Tensor();  // the layer's buffer is not held past its step
  return gradient_;
}

}  // namespace loom::nn
