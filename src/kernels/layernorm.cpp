#include "loom/kernels/layernorm.hpp"

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/training.hpp"
#include "loom/kernels/elementwise.hpp"
#include "validate.hpp"

namespace loom::kernels {

using detail::Arg;

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd, float eps, StreamRef stream) {
  const char* kernel = "layernorm_forward";
  const Device device = detail::common_device(
      kernel, {{"x", x}, {"weight", weight}, {"bias", bias}, {"out", out}, {"mean", mean}, {"rstd", rstd}});
  detail::require_floating(kernel, {"x", x});
  detail::require_same_dtype(kernel, {{"x", x}, {"weight", weight}, {"bias", bias}, {"out", out}});
  const std::int64_t channels = detail::last_dim(kernel, {"x", x});
  require(channels > 0, kernel, ": x must have a non-empty last dimension, got ", x);
  require(eps > 0.0f, kernel, ": eps must be positive, got ", eps);
  detail::require_shape(kernel, {"weight", weight}, Shape{channels});
  detail::require_shape(kernel, {"bias", bias}, Shape{channels});
  detail::require_shape(kernel, {"out", out}, x.shape());
  for (const Arg stat : {Arg{"mean", mean}, Arg{"rstd", rstd}}) {
    detail::require_dtype(kernel, stat, DType::f32);
    detail::require_numel(kernel, stat, x.numel() / channels);
  }
  detail::dispatch(kernel, device, stream, [&] { cpu::layernorm_forward(x, weight, bias, out, mean, rstd, eps); },
                   [&](void* s) { cuda::layernorm_forward(x, weight, bias, out, mean, rstd, eps, s); });
}

void residual_layernorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum, const Tensor& weight,
                                const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd, float eps,
                                StreamRef stream) {
  const char* kernel = "residual_layernorm_forward";
  const Device device = detail::common_device(kernel, {{"a", a}, {"b", b}, {"sum", sum}});
  detail::require_same_dtype(kernel, {{"a", a}, {"b", b}, {"sum", sum}});
  detail::require_shape(kernel, {"b", b}, a.shape());
  detail::require_shape(kernel, {"sum", sum}, a.shape());
  require(!sum.shares_storage_with(a) && !sum.shares_storage_with(b), kernel,
          ": sum must not share storage with a or b");
  if (device.is_cpu()) {  // the two CPU kernels, which are memory-bound on neither side of the fusion
    residual_add(a, b, sum, stream);
    layernorm_forward(sum, weight, bias, out, mean, rstd, eps, stream);
    return;
  }
  // The LayerNorm's own checks, on sum (the kernel is not run by this call).
  const std::int64_t channels = detail::last_dim(kernel, {"sum", sum});
  require(channels > 0, kernel, ": the inputs must have a non-empty last dimension, got ", a);
  require(eps > 0.0f, kernel, ": eps must be positive, got ", eps);
  detail::common_device(kernel, {{"a", a}, {"weight", weight}, {"bias", bias}, {"out", out}, {"mean", mean},
                                 {"rstd", rstd}});
  detail::require_floating(kernel, {"a", a});
  detail::require_same_dtype(kernel, {{"a", a}, {"weight", weight}, {"bias", bias}, {"out", out}});
  detail::require_shape(kernel, {"weight", weight}, Shape{channels});
  detail::require_shape(kernel, {"bias", bias}, Shape{channels});
  detail::require_shape(kernel, {"out", out}, a.shape());
  for (const Arg stat : {Arg{"mean", mean}, Arg{"rstd", rstd}}) {
    detail::require_dtype(kernel, stat, DType::f32);
    detail::require_numel(kernel, stat, a.numel() / channels);
  }
  detail::dispatch(kernel, device, stream, [] {},
                   [&](void* s) { cuda::residual_layernorm_forward(a, b, sum, weight, bias, out, mean, rstd, eps, s); });
}

namespace {

// Both entry points: `residual` undefined for layernorm_backward.
void layernorm_backward_impl(const char* kernel, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& mean, const Tensor& rstd, const Tensor& residual, const Tensor& dx,
                             const Tensor& dweight, const Tensor& dbias, StreamRef stream) {
  const Device device = detail::common_device(kernel, {{"dout", dout}, {"x", x}, {"weight", weight}, {"mean", mean},
                                                       {"rstd", rstd}, {"dx", dx}, {"dweight", dweight},
                                                       {"dbias", dbias}});
  detail::require_floating(kernel, {"x", x});
  detail::require_same_dtype(kernel, {{"x", x}, {"dout", dout}, {"weight", weight}, {"dx", dx}});
  const std::int64_t channels = detail::last_dim(kernel, {"x", x});
  require(channels > 0, kernel, ": x must have a non-empty last dimension, got ", x);
  detail::require_shape(kernel, {"dout", dout}, x.shape());
  detail::require_shape(kernel, {"dx", dx}, x.shape());
  detail::require_shape(kernel, {"weight", weight}, Shape{channels});
  detail::require_same_dtype(kernel, {{"dweight", dweight}, {"dbias", dbias}});
  require(!dx.shares_storage_with(dout) && !dx.shares_storage_with(x), kernel,
          ": dx must not share storage with dout or x (they are read after dx is written)");
  for (const Arg grad : {Arg{"dweight", dweight}, Arg{"dbias", dbias}}) {
    detail::require_shape(kernel, grad, Shape{channels});
    require(grad.tensor.dtype() == DType::f32 || grad.tensor.dtype() == x.dtype(), kernel, ": '", grad.name,
            "' must be f32 or ", x.dtype(), ", got ", grad.tensor);
  }
  for (const Arg stat : {Arg{"mean", mean}, Arg{"rstd", rstd}}) {
    detail::require_dtype(kernel, stat, DType::f32);
    detail::require_numel(kernel, stat, x.numel() / channels);
  }
  if (residual.defined()) {
    detail::common_device(kernel, {{"x", x}, {"residual", residual}});
    detail::require_same_dtype(kernel, {{"x", x}, {"residual", residual}});
    detail::require_shape(kernel, {"residual", residual}, x.shape());
    // (on a GPU the residual is read after dx, dweight and dbias are written)
    require(!residual.shares_storage_with(dx) && !residual.shares_storage_with(dweight) &&
                !residual.shares_storage_with(dbias),
            kernel, ": residual must not share storage with dx, dweight or dbias");
  }
  detail::dispatch(
      kernel, device, stream,
      [&] { cpu::layernorm_backward(dout, x, weight, mean, rstd, residual, dx, dweight, dbias); },
      [&](void* s) {
        cuda::layernorm_backward(dout, x, weight, mean, rstd, dx, dweight, dbias, s);
        // (a second pass on a GPU: the same additions as residual_add)
        if (residual.defined()) cuda::residual_add(residual, dx, dx, s);
      });
}

}  // namespace

void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                        StreamRef stream) {
  layernorm_backward_impl("layernorm_backward", dout, x, weight, mean, rstd, Tensor(), dx, dweight, dbias, stream);
}

void layernorm_backward_residual(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& residual, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias, StreamRef stream) {
  require(residual.defined(), "layernorm_backward_residual: 'residual' is undefined");
  layernorm_backward_impl("layernorm_backward_residual", dout, x, weight, mean, rstd, residual, dx, dweight, dbias,
                          stream);
}

}  // namespace loom::kernels
