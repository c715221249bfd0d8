#include "mlp.hpp"

#include <cmath>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/kernels/cast.hpp"

namespace train_mlp {

using loom::DType;
using loom::Tensor;

void MlpConfig::validate() const {
  loom::require(inputs > 0 && hidden > 0 && outputs > 0 && layers >= 1, "MLP: inputs, hidden and outputs must be "
                "positive and layers >= 1, got ", inputs, ", ", hidden, ", ", outputs, " and ", layers);
}

Mlp::Mlp(const MlpConfig& config, const loom::model::Precision& precision, loom::Device device, std::uint64_t seed,
         const loom::model::SpaceLayout& layout)
    : config_((config.validate(), precision.validate(), config)), precision_(precision), device_(device) {
  std::vector<loom::model::UnitSpec> units;
  for (std::int64_t l = 0; l < config.layers; ++l) {
    const bool last = l + 1 == config.layers;
    const std::int64_t in = l == 0 ? config.inputs : config.hidden, out = last ? config.outputs : config.hidden;
    std::string name = "layer";
    name += std::to_string(l);
    layers_.push_back(std::make_unique<loom::nn::Linear>(name, in, out, loom::nn::LinearOptions{.bias = true, .gelu = !last},
                                                         precision, device));
    units.push_back({name, {}});
    layers_.back()->collect_parameters(units.back().parameters);
    layers_.back()->weight().set_init(loom::model::Init::normal(1.0f / std::sqrt(static_cast<float>(in))));
  }
  space_ = std::make_unique<loom::model::ParameterSpace>(std::move(units), layout);
  space_->initialize(seed);
}

std::vector<std::pair<std::string, std::int64_t>> Mlp::architecture() const {
  return {{"inputs", config_.inputs}, {"hidden", config_.hidden}, {"layers", config_.layers},
          {"outputs", config_.outputs}};
}

namespace {

// `buffer`, reallocated only when its shape, dtype or device changes: a step after the first
// allocates nothing on the device.
const Tensor& reuse(Tensor& buffer, const loom::Shape& shape, DType dtype, loom::Device device) {
  if (!buffer.defined() || buffer.shape() != shape || buffer.dtype() != dtype || buffer.device() != device) {
    buffer = Tensor::empty(shape, dtype, device);
  }
  return buffer;
}

}  // namespace

float Mlp::forward(const Tensor& inputs, const Tensor& targets, loom::StreamRef stream) {
  loom::require(inputs.defined() && inputs.dtype() == DType::f32 && inputs.shape().rank() == 2 &&
                    inputs.shape()[1] == config_.inputs,
                "MLP: inputs must be [B, ", config_.inputs, "] f32, got ", inputs);
  loom::require(targets.defined() && targets.dtype() == DType::f32 &&
                    targets.shape() == loom::Shape{inputs.shape()[0], config_.outputs},
                "MLP: targets must be [", inputs.shape()[0], ", ", config_.outputs, "] f32, got ", targets);
  const Tensor x = inputs.device() == device_ ? inputs : reuse(staged_inputs_, inputs.shape(), DType::f32, device_);
  if (inputs.device() != device_) loom::copy(x, inputs, stream);
  input_ = precision_.storage == DType::f32 ? x : reuse(input_, x.shape(), precision_.storage, device_);
  if (precision_.storage != DType::f32) loom::kernels::cast(x, input_, {}, stream);
  Tensor h = input_;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    before_forward(l, stream);
    h = layers_[l]->forward(h, stream);
    after_forward(l, stream);
  }
  output_ = h;
  return loss_.forward(output_, targets, stream);
}

void Mlp::backward(float loss_scale, loom::StreamRef stream) {
  Tensor d = loss_.backward(loss_scale, stream);  // loss_scale x d(loss)/dy
  for (std::size_t l = layers_.size(); l-- > 0;) {
    before_backward(l, stream);
    d = layers_[l]->backward(d, stream);
    after_backward(l, stream);
  }
}

}  // namespace train_mlp
