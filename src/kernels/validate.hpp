// Argument checks shared by the kernel entry points: every message names the kernel, the
// argument and the offending tensor.
#pragma once

#include <initializer_list>

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

// True for the CPU (checking the stream fits); throws for CUDA kernels that have not landed.
bool runs_on_cpu(const char* kernel, Device device, StreamRef stream);

}  // namespace loom::kernels::detail
