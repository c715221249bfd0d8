#include "loom/nn/linear.hpp"

#include <memory>

#include "loom/core/error.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/gemm.hpp"
#include "src/nn/buffer.hpp"
#include "src/nn/linear_backward.hpp"

namespace loom::nn {

using kernels::GemmOptions;
using kernels::StridedMatrix;

Linear::Linear(const std::string& name, std::int64_t in_features, std::int64_t out_features, LinearOptions options,
               const Precision& precision, Device device)
    : in_(in_features),
      out_(out_features),
      options_(options),
      precision_(precision),
      weight_(name + ".weight", Shape{out_features, in_features}, precision.storage, device, true) {
  // Descriptions: the model's parameter space gives them storage and, when it initialises them,
  // GPT-2's N(0, 0.02) weights and zero biases (a model may set its own scheme instead).
  weight_.set_init(model::Init::normal(0.02f));
  if (options.bias) {
    bias_ = std::make_unique<Parameter>(name + ".bias", Shape{out_features}, precision.storage, device, false);
    bias_->set_init(model::Init::zeros());
  }
}

void Linear::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (bias_) out.push_back(bias_.get());
}

void Linear::release_activations() {
  input_ = Tensor();  // (a handle on the layer before's buffer: dropped, not pooled)
  for (Tensor* t : {&output_, &pre_activation_, &dx_, &dpre_, &bias_grad_scratch_}) detail::release(*t);
}

void Linear::release_output() { detail::release(output_); }

void Linear::restore_input(const Tensor& x) {
  require(x.defined() && x.shape()[-1] == in_, "Linear '", weight_.name(), "': restored input must end in ", in_,
          " features, got ", x);
  input_ = detail::as_rows(x);
}

bool Linear::gelu_recomputable() const noexcept { return options_.gelu && weight_.device().is_cpu(); }

void Linear::release_gelu_output() {
  require(gelu_recomputable(), "Linear '", weight_.name(), "': its GELU output cannot be recomputed here");
  detail::release(output_);
}

Tensor Linear::recompute_gelu_output(StreamRef stream) {
  require(gelu_recomputable() && pre_activation_.defined(), "Linear '", weight_.name(),
          "': no kept pre-activation to recompute the GELU output from");
  detail::ensure_buffer(output_, pre_activation_.shape(), precision_.storage, weight_.device());
  // The same operations as the CPU epilogue's GELU on the same stored pre-activation: the same bits.
  kernels::gelu_forward(pre_activation_, output_, stream);
  return output_;
}

Tensor Linear::forward(const Tensor& x, StreamRef stream) {
  require(x.defined() && x.shape().rank() >= 1 && x.shape()[-1] == in_, "Linear '", weight_.name(),
          "': input must end in ", in_, " features, got ", x);
  detail::require_storage(weight_);
  if (bias_) detail::require_storage(*bias_);
  input_ = detail::as_rows(x);
  const std::int64_t rows = input_.shape()[0];
  const Device device = weight_.device();
  detail::ensure_buffer(output_, {rows, out_}, precision_.storage, device);
  GemmOptions options;
  options.trans_b = true;
  options.precision = precision_.gemm;
  if (bias_) options.epilogue.bias = bias_->value();
  if (options_.gelu) {
    options.epilogue.activation = kernels::Activation::gelu;
    options.epilogue.pre_activation = detail::ensure_buffer(pre_activation_, {rows, out_}, precision_.storage, device);
  }
  kernels::gemm(input_, weight_.value(), output_, options, stream);
  return output_.view(detail::with_last(x.shape(), out_));
}

Tensor Linear::backward(const Tensor& dy, StreamRef stream) {
  require(input_.defined(), "Linear '", weight_.name(), "': backward before forward");
  detail::require_grad_storage(weight_);
  if (bias_) detail::require_grad_storage(*bias_);
  const Tensor dy_rows = detail::as_rows(dy);
  require(dy_rows.shape() == Shape{input_.shape()[0], out_}, "Linear '", weight_.name(), "': dy ", dy,
          " does not match the forward output [", input_.shape()[0], ", ", out_, "]");
  const Device device = weight_.device();
  Tensor grad_out = dy_rows;
  if (options_.gelu) {
    detail::ensure_buffer(dpre_, dy_rows.shape(), precision_.storage, device);
    kernels::gelu_backward(pre_activation_, dy_rows, dpre_, stream);
    grad_out = dpre_;
  }
  detail::linear_backward(grad_out, input_, weight_, bias_.get(), bias_grad_scratch_, dx_, precision_, stream);
  return dx_.view(detail::with_last(dy.shape(), in_));
}

namespace detail {

Tensor linear_backward(const Tensor& grad_out, const Tensor& input, Parameter& weight, Parameter* bias,
                       Tensor& bias_grad_scratch, Tensor& dx_buffer, const Precision& precision, StreamRef stream) {
  const Device device = weight.device();
  GemmOptions dw;
  dw.trans_a = true;
  dw.beta = 1.0f;
  dw.precision = precision.gemm;
  if (bias != nullptr) dw.epilogue.bias_grad = ensure_buffer(bias_grad_scratch, {grad_out.shape()[1]}, DType::f32, device);
  const StridedMatrix grad_w = StridedMatrix::of(weight.grad());
  kernels::gemm(StridedMatrix::of(grad_out), StridedMatrix::of(input), grad_w, grad_w, dw, stream);
  weight.mark_grad_ready(stream);
  if (bias != nullptr) {
    kernels::residual_add(bias->grad(), bias_grad_scratch, bias->grad(), stream);
    bias->mark_grad_ready(stream);
  }
  ensure_buffer(dx_buffer, input.shape(), precision.storage, device);
  GemmOptions dx;
  dx.precision = precision.gemm;
  kernels::gemm(grad_out, weight.value(), dx_buffer, dx, stream);
  return dx_buffer;
}

}  // namespace detail

}  // namespace loom::nn
