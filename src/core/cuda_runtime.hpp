// loom's internal seam to the CUDA runtime. Two implementations: cuda/cuda_runtime.cpp when the
// build has CUDA, cuda_runtime_disabled.cpp (every call throws a cuda Error naming the build
// option, except status()) when it does not. Handles are passed as void* so that no header above
// this seam needs CUDA's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/gpu_info.hpp"

namespace loom::detail::cuda_rt {

CudaRuntimeStatus status();
CudaDeviceProperties device_properties(int device);
CudaPeerLink peer_link(int from, int to);

// Throws a cuda Error unless device is a valid index on this machine (and the build has CUDA).
void require_device(int device);
void set_current_device(int device);  // cudaSetDevice, checked

void* malloc(int device, std::size_t bytes);  // nullptr when the device is out of memory
void free(int device, void* ptr) noexcept;
// Page-locked host memory (cudaHostAlloc); nullptr when there is not enough.
void* host_alloc(int device, std::size_t bytes);
void host_free(int device, void* ptr) noexcept;

// Copies bytes between any two pointers (host or device, via unified addressing), on stream;
// with a null stream, on the default stream and finished before returning.
void memcpy(int device, void* dst, const void* src, std::size_t bytes, void* stream);

// Writes count copies of an element_size-byte pattern (1, 2, 4 or 8 bytes) to dst.
void fill(int device, void* dst, std::int64_t count, std::uint64_t pattern, std::size_t element_size,
          void* stream);

void* stream_create(int device);
void stream_destroy(int device, void* stream) noexcept;
void stream_synchronize(int device, void* stream);
bool stream_query(int device, void* stream);
void stream_wait_event(int device, void* stream, void* event);

void* event_create(int device, bool enable_timing);
void event_destroy(int device, void* event) noexcept;
void event_record(int device, void* event, void* stream);
void event_synchronize(int device, void* event);
bool event_query(int device, void* event);
float event_elapsed_ms(int device, void* start, void* end);

}  // namespace loom::detail::cuda_rt
