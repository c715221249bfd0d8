#include "loom/core/gpu_info.hpp"

#include "cuda_runtime.hpp"

namespace loom {

CudaRuntimeStatus cuda_runtime_status() { return detail::cuda_rt::status(); }

CudaDeviceProperties cuda_device_properties(int index) { return detail::cuda_rt::device_properties(index); }

CudaPeerLink cuda_peer_link(int from, int to) { return detail::cuda_rt::peer_link(from, to); }

void set_current_cuda_device(int index) { detail::cuda_rt::set_current_device(index); }

}  // namespace loom
