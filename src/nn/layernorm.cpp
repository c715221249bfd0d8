#include "loom/nn/layernorm.hpp"

#include "loom/core/error.hpp"
#include "loom/kernels/layernorm.hpp"
#include "src/nn/buffer.hpp"

namespace loom::nn {

LayerNorm::LayerNorm(const std::string& name, std::int64_t channels, const Precision& precision, Device device,
                     float eps)
    : channels_(channels),
      eps_(eps),
      precision_(precision),
      weight_(name + ".weight", Shape{channels}, precision.storage, device, false),
      bias_(name + ".bias", Shape{channels}, precision.storage, device, false) {
  // Descriptions: the model's parameter space gives them storage and these values.
  weight_.set_init(model::Init::ones());
  bias_.set_init(model::Init::zeros());
}

void LayerNorm::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

void LayerNorm::release_activations() {
  input_ = Tensor();  // (a handle on the layer before's buffer: dropped, not pooled)
  for (Tensor* t : {&output_, &mean_, &rstd_, &dx_}) detail::release(*t);
}

void LayerNorm::release_output() { detail::release(output_); }

Tensor LayerNorm::recompute_output(StreamRef stream) {
  require(input_.defined(), "LayerNorm '", weight_.name(), "': recompute before forward");
  detail::require_storage(weight_);
  detail::require_storage(bias_);
  detail::ensure_buffer(output_, input_.shape(), precision_.storage, weight_.device());
  kernels::layernorm_forward(input_, weight_.value(), bias_.value(), output_, mean_, rstd_, eps_, stream);
  return output_;
}

void LayerNorm::prepare_forward(const Tensor& input_rows) {
  detail::require_storage(weight_);
  detail::require_storage(bias_);
  input_ = input_rows;
  const Device device = weight_.device();
  detail::ensure_buffer(output_, input_.shape(), precision_.storage, device);
  detail::ensure_buffer(mean_, {input_.shape()[0]}, DType::f32, device);
  detail::ensure_buffer(rstd_, {input_.shape()[0]}, DType::f32, device);
}

Tensor LayerNorm::forward(const Tensor& x, StreamRef stream) {
  require(x.defined() && x.shape().rank() >= 1 && x.shape()[-1] == channels_, "LayerNorm '", weight_.name(),
          "': input must end in ", channels_, " channels, got ", x);
  prepare_forward(detail::as_rows(x));
  kernels::layernorm_forward(input_, weight_.value(), bias_.value(), output_, mean_, rstd_, eps_, stream);
  return output_.view(x.shape());
}

Tensor LayerNorm::forward_residual(const Tensor& a, const Tensor& b, const Tensor& sum, StreamRef stream) {
  require(a.defined() && a.shape().rank() >= 1 && a.shape()[-1] == channels_, "LayerNorm '", weight_.name(),
          "': input must end in ", channels_, " channels, got ", a);
  prepare_forward(detail::as_rows(sum));
  kernels::residual_layernorm_forward(detail::as_rows(a), detail::as_rows(b), input_, weight_.value(), bias_.value(),
                                      output_, mean_, rstd_, eps_, stream);
  return output_.view(a.shape());
}

Tensor LayerNorm::backward(const Tensor& dy, StreamRef stream) { return backward_residual(dy, Tensor(), stream); }

Tensor LayerNorm::backward_residual(const Tensor& dy, const Tensor& dresidual, StreamRef stream) {
  require(input_.defined(), "LayerNorm '", weight_.name(), "': backward before forward");
  detail::require_grad_storage(weight_);
  detail::require_grad_storage(bias_);
  const Tensor dy_rows = detail::as_rows(dy);
  require(dy_rows.shape() == input_.shape(), "LayerNorm '", weight_.name(), "': dy ", dy,
          " does not match the forward input");
  detail::ensure_buffer(dx_, input_.shape(), precision_.storage, weight_.device());
  if (dresidual.defined()) {
    require(dresidual.shape() == dy.shape(), "LayerNorm '", weight_.name(), "': the residual gradient ", dresidual,
            " does not match dy ", dy);
    kernels::layernorm_backward_residual(dy_rows, input_, weight_.value(), mean_, rstd_, detail::as_rows(dresidual),
                                         dx_, weight_.grad(), bias_.grad(), stream);
  } else {
    kernels::layernorm_backward(dy_rows, input_, weight_.value(), mean_, rstd_, dx_, weight_.grad(), bias_.grad(),
                                stream);
  }
  weight_.mark_grad_ready(stream);
  bias_.mark_grad_ready(stream);
  return dx_.view(dy.shape());
}

}  // namespace loom::nn
