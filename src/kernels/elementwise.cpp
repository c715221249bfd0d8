#include "loom/kernels/elementwise.hpp"

#include "kernels/cpu/training.hpp"
#include "validate.hpp"

namespace loom::kernels {

using detail::Arg;

namespace {
// One floating dtype, one device, one element count for every argument.
Device check_elementwise(const char* kernel, std::initializer_list<Arg> args, StreamRef stream) {
  const Device device = detail::common_device(kernel, args);
  detail::require_floating(kernel, *args.begin());
  detail::require_same_dtype(kernel, args);
  for (const Arg& arg : args) detail::require_numel(kernel, arg, args.begin()->tensor.numel());
  detail::runs_on_cpu(kernel, device, stream);
  return device;
}
}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out, StreamRef stream) {
  check_elementwise("gelu_forward", {{"x", x}, {"out", out}}, stream);
  cpu::gelu_forward(x, out);
}

void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx, StreamRef stream) {
  check_elementwise("gelu_backward", {{"x", x}, {"dout", dout}, {"dx", dx}}, stream);
  cpu::gelu_backward(x, dout, dx);
}

void residual_add(const Tensor& a, const Tensor& b, const Tensor& out, StreamRef stream) {
  check_elementwise("residual_add", {{"a", a}, {"b", b}, {"out", out}}, stream);
  cpu::residual_add(a, b, out);
}

}  // namespace loom::kernels
