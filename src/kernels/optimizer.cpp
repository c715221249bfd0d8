#include "loom/kernels/optimizer.hpp"

#include <cmath>
#include <string>

#include "kernels/cpu/optimizer.hpp"
#include "kernels/cuda/training.hpp"
#include "loom/kernels/grad_utils.hpp"
#include "validate.hpp"

namespace loom::kernels {

namespace {

// Checks one parameter's tensors; `index` names it in messages. Returns its device.
Device check_parameter(const char* kernel, std::size_t index, const Tensor& param, const Tensor& grad,
                       std::initializer_list<detail::Arg> f32_state, const Tensor& model) {
  const std::string where = std::string(kernel) + " (tensor " + std::to_string(index) + ")";
  const Device device = detail::common_device(where.c_str(), {{"param", param}, {"grad", grad}});
  detail::require_dtype(where.c_str(), {"param", param}, DType::f32);
  detail::require_floating(where.c_str(), {"grad", grad});
  detail::require_numel(where.c_str(), {"grad", grad}, param.numel());
  for (const detail::Arg& state : f32_state) {
    detail::common_device(where.c_str(), {{"param", param}, state});
    detail::require_dtype(where.c_str(), state, DType::f32);
    detail::require_numel(where.c_str(), state, param.numel());
  }
  if (model.defined()) {
    detail::common_device(where.c_str(), {{"param", param}, {"model", model}});
    require(model.dtype() == DType::f16 || model.dtype() == DType::bf16, where, ": 'model' must be f16 or bf16, got ",
            model);
    detail::require_numel(where.c_str(), {"model", model}, param.numel());
  }
  return device;
}

template <class Tensors, class Check>
Device check_all(const char* kernel, Tensors tensors, Check&& check) {
  require(!tensors.empty(), kernel, ": no tensors given");
  Device device = Device::cpu();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Device d = check(i, tensors[i]);
    require(i == 0 || d == device, kernel, ": tensor ", i, " is on ", d, " but tensor 0 is on ", device);
    device = d;
  }
  return device;
}

}  // namespace

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hp, StreamRef stream) {
  const char* kernel = "adamw_step";
  require(hp.step >= 1, kernel, ": step must be >= 1 (1-based), got ", hp.step);
  require(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1, kernel, ": betas must be in [0, 1), got ",
          hp.beta1, " and ", hp.beta2);
  require(hp.eps > 0 && std::isfinite(hp.lr), kernel, ": eps must be > 0 and lr finite, got eps ", hp.eps, ", lr ",
          hp.lr);
  const Device device = check_all(kernel, tensors, [&](std::size_t i, const AdamWTensor& t) {
    return check_parameter(kernel, i, t.param, t.grad, {{"m", t.m}, {"v", t.v}}, t.model);
  });
  detail::dispatch(kernel, device, stream, [&] { cpu::adamw_step(tensors, hp); },
                   [&](void* s) { cuda::adamw_step(tensors, hp, s); });
}

void sgd_step(std::span<const SgdTensor> tensors, const SgdHyperparameters& hp, StreamRef stream) {
  const char* kernel = "sgd_step";
  require(hp.step >= 1, kernel, ": step must be >= 1 (1-based), got ", hp.step);
  require(!hp.nesterov || (hp.momentum > 0 && hp.dampening == 0), kernel,
          ": nesterov needs momentum > 0 and dampening 0, got momentum ", hp.momentum, ", dampening ", hp.dampening);
  const Device device = check_all(kernel, tensors, [&](std::size_t i, const SgdTensor& t) {
    if (hp.momentum == 0.0f) return check_parameter(kernel, i, t.param, t.grad, {}, t.model);
    return check_parameter(kernel, i, t.param, t.grad, {{"momentum_buffer", t.momentum_buffer}}, t.model);
  });
  detail::dispatch(kernel, device, stream, [&] { cpu::sgd_step(tensors, hp); },
                   [&](void* s) { cuda::sgd_step(tensors, hp, s); });
}

namespace {
Device check_scalar_output(const char* kernel, std::span<const Tensor> tensors, const Tensor& out,
                           const char* out_name) {
  const Device device = detail::common_device(kernel, {{out_name, out}});
  detail::require_dtype(kernel, {out_name, out}, DType::f32);
  detail::require_shape(kernel, {out_name, out}, Shape{1});
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = "tensor " + std::to_string(i);
    detail::common_device(kernel, {{out_name, out}, {name.c_str(), tensors[i]}});
    detail::require_floating(kernel, {name.c_str(), tensors[i]});
  }
  return device;
}
}  // namespace

void unscale_and_check_finite(std::span<const Tensor> grads, float scale, const Tensor& found_nonfinite,
                              StreamRef stream) {
  const char* kernel = "unscale_and_check_finite";
  const Device device = check_scalar_output(kernel, grads, found_nonfinite, "found_nonfinite");
  detail::dispatch(kernel, device, stream, [&] { cpu::unscale_and_check_finite(grads, scale, found_nonfinite); },
                   [&](void* s) { cuda::unscale_and_check_finite(grads, scale, found_nonfinite, s); });
}

void sum_of_squares(std::span<const Tensor> tensors, const Tensor& out, StreamRef stream) {
  const Device device = check_scalar_output("sum_of_squares", tensors, out, "out");
  detail::dispatch("sum_of_squares", device, stream,
                   [&] { out.data<float>()[0] = static_cast<float>(cpu::sum_of_squares(tensors)); },
                   [&](void* s) { cuda::sum_of_squares(tensors, out, false, s); });
}

void global_l2_norm(std::span<const Tensor> tensors, const Tensor& out, StreamRef stream) {
  const Device device = check_scalar_output("global_l2_norm", tensors, out, "out");
  detail::dispatch("global_l2_norm", device, stream,
                   [&] { out.data<float>()[0] = static_cast<float>(std::sqrt(cpu::sum_of_squares(tensors))); },
                   [&](void* s) { cuda::sum_of_squares(tensors, out, true, s); });
}

}  // namespace loom::kernels
