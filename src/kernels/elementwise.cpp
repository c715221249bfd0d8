#include "loom/kernels/elementwise.hpp"

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/training.hpp"
#include "validate.hpp"

namespace loom::kernels {

using detail::Arg;

namespace {
// One floating dtype, one device, one element count for every argument.
Device check_elementwise(const char* kernel, std::initializer_list<Arg> args) {
  const Device device = detail::common_device(kernel, args);
  detail::require_floating(kernel, *args.begin());
  detail::require_same_dtype(kernel, args);
  for (const Arg& arg : args) detail::require_numel(kernel, arg, args.begin()->tensor.numel());
  return device;
}
}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out, StreamRef stream) {
  const Device device = check_elementwise("gelu_forward", {{"x", x}, {"out", out}});
  detail::dispatch("gelu_forward", device, stream, [&] { cpu::gelu_forward(x, out); },
                   [&](void* s) { cuda::gelu_forward(x, out, s); });
}

void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx, StreamRef stream) {
  const Device device = check_elementwise("gelu_backward", {{"x", x}, {"dout", dout}, {"dx", dx}});
  detail::dispatch("gelu_backward", device, stream, [&] { cpu::gelu_backward(x, dout, dx); },
                   [&](void* s) { cuda::gelu_backward(x, dout, dx, s); });
}

void residual_add(const Tensor& a, const Tensor& b, const Tensor& out, StreamRef stream) {
  const Device device = check_elementwise("residual_add", {{"a", a}, {"b", b}, {"out", out}});
  detail::dispatch("residual_add", device, stream, [&] { cpu::residual_add(a, b, out); },
                   [&](void* s) { cuda::residual_add(a, b, out, s); });
}

}  // namespace loom::kernels
