// Argument checks shared by the kernel entry points: every message names the kernel, the
// argument and the offending tensor.
#pragma once

#include <initializer_list>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels::detail {

struct Arg {
  const char* name;
  const Tensor& tensor;
};

// Every argument defined and on one device; that device.
Device common_device(const char* kernel, std::initializer_list<Arg> args);
void require_floating(const char* kernel, const Arg& arg);
void require_dtype(const char* kernel, const Arg& arg, DType dtype);
// Every argument has the first one's dtype.
void require_same_dtype(const char* kernel, std::initializer_list<Arg> args);
void require_shape(const char* kernel, const Arg& arg, const Shape& shape);
void require_numel(const char* kernel, const Arg& arg, std::int64_t numel);
// The last dimension of a [..., C] tensor (rank >= 1).
std::int64_t last_dim(const char* kernel, const Arg& arg);

// Runs on_cpu() for CPU tensors and on_cuda(native stream) for CUDA tensors, after checking that
// the stream suits the device. In a build without CUDA, CUDA tensors get a cuda Error.
template <class Cpu, class Cuda>
void dispatch(const char* kernel, Device device, StreamRef stream, Cpu&& on_cpu, Cuda&& on_cuda) {
  if (device.is_cpu()) {
    require(stream.device().is_cpu(), kernel, ": CPU tensors were given a stream on ", stream.device());
    on_cpu();
    return;
  }
  require(stream.is_default() || stream.device() == device, kernel, ": tensors on ", device,
          " were given a stream on ", stream.device());
#if LOOM_WITH_CUDA
  on_cuda(stream.native_handle());
#else
  (void)on_cuda;
  fail(ErrorCategory::cuda, kernel, " on ", device,
       ": this build of loom has no CUDA support (configured with LOOM_CUDA=OFF, or no toolkit was found)");
#endif
}

}  // namespace loom::kernels::detail
