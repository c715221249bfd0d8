#include "validate.hpp"

namespace loom::kernels::detail {

Device common_device(const char* kernel, std::initializer_list<Arg> args) {
  const Arg* first = nullptr;
  for (const Arg& arg : args) {
    require(arg.tensor.defined(), kernel, ": argument '", arg.name, "' is an undefined tensor");
    if (first == nullptr) {
      first = &arg;
    } else {
      require(arg.tensor.device() == first->tensor.device(), kernel, ": '", arg.name, "' is on ",
              arg.tensor.device(), " but '", first->name, "' is on ", first->tensor.device());
    }
  }
  return first != nullptr ? first->tensor.device() : Device::cpu();
}

void require_floating(const char* kernel, const Arg& arg) {
  require(is_floating_point(arg.tensor.dtype()), kernel, ": '", arg.name, "' must be f32, f16 or bf16, got ",
          arg.tensor);
}

void require_dtype(const char* kernel, const Arg& arg, DType dtype) {
  require(arg.tensor.dtype() == dtype, kernel, ": '", arg.name, "' must be ", dtype, ", got ", arg.tensor);
}

void require_same_dtype(const char* kernel, std::initializer_list<Arg> args) {
  const Arg& first = *args.begin();
  for (const Arg& arg : args) {
    require(arg.tensor.dtype() == first.tensor.dtype(), kernel, ": '", arg.name, "' is ", arg.tensor.dtype(),
            " but '", first.name, "' is ", first.tensor.dtype());
  }
}

void require_shape(const char* kernel, const Arg& arg, const Shape& shape) {
  require(arg.tensor.shape() == shape, kernel, ": '", arg.name, "' must have shape ", shape, ", got ",
          arg.tensor);
}

void require_numel(const char* kernel, const Arg& arg, std::int64_t numel) {
  require(arg.tensor.numel() == numel, kernel, ": '", arg.name, "' must have ", numel, " elements, got ",
          arg.tensor);
}

std::int64_t last_dim(const char* kernel, const Arg& arg) {
  require(arg.tensor.rank() >= 1, kernel, ": '", arg.name, "' must have rank >= 1, got ", arg.tensor);
  return arg.tensor.size(-1);
}

}  // namespace loom::kernels::detail
