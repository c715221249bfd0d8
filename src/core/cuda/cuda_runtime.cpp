// The CUDA runtime seam, for builds with CUDA. Every return code is checked; functions that run
// in destructors (free, *_destroy) report failures on stderr instead of throwing.
#include "../cuda_runtime.hpp"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "loom/core/cuda_device_guard.hpp"
#include "fill.hpp"
#include "loom/core/cuda_check.hpp"
#include "loom/core/device_calls.hpp"
#include "loom/core/error.hpp"
#include "loom/core/visible_devices.hpp"

namespace loom::detail::cuda_rt {

namespace {

void report_in_destructor(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "loom: %s failed during cleanup: %s (%s)\n", call, cudaGetErrorName(status),
                 cudaGetErrorString(status));
  }
}

// "cudaXxx on cuda:N", the call named in an error.
std::string on_device(const char* call, int device) { return std::string(call) + " on cuda:" + std::to_string(device); }

// For cudaStreamQuery / cudaEventQuery: true when done, false when still running, else an Error.
bool completed(cudaError_t status, const std::string& call) {
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error to leave behind
    return false;
  }
  check(status, call);
  return true;
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
cudaEvent_t as_event(void* event) { return static_cast<cudaEvent_t>(event); }

}  // namespace

CudaRuntimeStatus status() {
  CudaRuntimeStatus result;
  result.compiled = true;
  if (cudaRuntimeGetVersion(&result.runtime_version) != cudaSuccess) result.runtime_version = 0;
  if (cudaDriverGetVersion(&result.driver_version) != cudaSuccess) result.driver_version = 0;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    result.reason = result.driver_version == 0 ? "no CUDA driver is installed or loadable; " : "";
    result.reason += std::string("cudaGetDeviceCount returned ") + cudaGetErrorName(error) + " (" +
                     cudaGetErrorString(error) + ")";
    cudaGetLastError();  // not sticky; leave no error behind for later calls
    return result;
  }
  result.device_count = count;
  if (count == 0) result.reason = "the CUDA driver reports no devices";
  return result;
}

void set_current_device(int device) {
  require_device(device);
  check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
}

void require_device(int device) {
  const CudaRuntimeStatus current = status();
  if (!current.available()) fail(ErrorCategory::cuda, "cannot use cuda:", device, ": ", current.reason);
  if (device < 0 || device >= current.device_count) {
    fail(ErrorCategory::cuda, "cuda:", device, " does not exist: this machine has ", current.device_count,
         " CUDA device(s)");
  }
}

CudaDeviceProperties device_properties(int device) {
  require_device(device);
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  CudaDeviceProperties result;
  result.index = device;
  result.name = props.name;
  result.compute_major = props.major;
  result.compute_minor = props.minor;
  result.total_memory_bytes = props.totalGlobalMem;
  result.multiprocessor_count = props.multiProcessorCount;
  char bus_id[32];
  std::snprintf(bus_id, sizeof bus_id, "%04x:%02x:%02x.0", static_cast<unsigned>(props.pciDomainID),
                static_cast<unsigned>(props.pciBusID), static_cast<unsigned>(props.pciDeviceID));
  result.pci_bus_id = bus_id;
  std::array<unsigned char, 16> uuid{};
  static_assert(sizeof props.uuid.bytes == uuid.size());
  std::memcpy(uuid.data(), props.uuid.bytes, uuid.size());
  result.uuid = format_uuid(uuid);
  return result;
}

CudaPeerLink peer_link(int from, int to) {
  require_device(from);
  require_device(to);
  CudaPeerLink link;
  if (from == to) return link;
  int value = 0;
  const std::string pair = std::to_string(from) + " -> " + std::to_string(to);
  check(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, from, to), "cudaDeviceGetP2PAttribute(access, " + pair + ")");
  link.access = value != 0;
  if (!link.access) return link;
  check(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, from, to),
        "cudaDeviceGetP2PAttribute(native atomics, " + pair + ")");
  link.native_atomics = value != 0;
  check(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrPerformanceRank, from, to),
        "cudaDeviceGetP2PAttribute(performance rank, " + pair + ")");
  link.performance_rank = value;
  return link;
}

void* malloc(int device, std::size_t bytes) {
  CudaDeviceGuard guard(device);
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: out of memory is an answer here, not a failure
    return nullptr;
  }
  check(error, "cudaMalloc(" + std::to_string(bytes) + " bytes) on cuda:" + std::to_string(device));
  count_device_call(DeviceCall::allocation);
  return ptr;
}

void free(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  int previous = device;
  report_in_destructor(cudaGetDevice(&previous), "cudaGetDevice");
  if (previous != device) report_in_destructor(cudaSetDevice(device), "cudaSetDevice");
  report_in_destructor(cudaFree(ptr), "cudaFree");
  count_device_call(DeviceCall::free);
  if (previous != device) report_in_destructor(cudaSetDevice(previous), "cudaSetDevice");
}

void* host_alloc(int device, std::size_t bytes) {
  CudaDeviceGuard guard(device);
  void* ptr = nullptr;
  const cudaError_t error = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check(error, "cudaHostAlloc(" + std::to_string(bytes) + " bytes) for cuda:" + std::to_string(device));
  return ptr;
}

void host_free(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  (void)device;  // pinned memory is the process's, not a device's: no device switch needed
  report_in_destructor(cudaFreeHost(ptr), "cudaFreeHost");
}

void memcpy(int device, void* dst, const void* src, std::size_t bytes, void* stream) {
  CudaDeviceGuard guard(device);
  const std::string call = "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes) on cuda:" + std::to_string(device);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)), call);
  if (stream == nullptr) check(cudaStreamSynchronize(nullptr), call + ", synchronizing");
}

void fill(int device, void* dst, std::int64_t count, std::uint64_t pattern, std::size_t element_size,
          void* stream) {
  CudaDeviceGuard guard(device);
  check(cudaGetLastError(), "an earlier CUDA call on cuda:" + std::to_string(device));  // not the fill's
  launch_fill(dst, count, pattern, element_size, as_stream(stream));
  const std::string call = "fill kernel (" + std::to_string(count) + " x " + std::to_string(element_size) +
                           " bytes) on cuda:" + std::to_string(device);
  check(cudaGetLastError(), call);
  if (stream == nullptr) check(cudaStreamSynchronize(nullptr), call + ", synchronizing");
}

void* stream_create(int device) {
  require_device(device);
  CudaDeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), on_device("cudaStreamCreateWithFlags", device));
  return stream;
}

void stream_destroy(int, void* stream) noexcept { report_in_destructor(cudaStreamDestroy(as_stream(stream)), "cudaStreamDestroy"); }

void stream_synchronize(int device, void* stream) {
  CudaDeviceGuard guard(device);
  check(cudaStreamSynchronize(as_stream(stream)), on_device("cudaStreamSynchronize", device));
}

bool stream_query(int device, void* stream) {
  CudaDeviceGuard guard(device);
  return completed(cudaStreamQuery(as_stream(stream)), on_device("cudaStreamQuery", device));
}

void stream_wait_event(int device, void* stream, void* event) {
  CudaDeviceGuard guard(device);
  check(cudaStreamWaitEvent(as_stream(stream), as_event(event), 0), on_device("cudaStreamWaitEvent", device));
}

void* event_create(int device, bool enable_timing) {
  require_device(device);
  CudaDeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming),
        on_device("cudaEventCreateWithFlags", device));
  return event;
}

void event_destroy(int, void* event) noexcept { report_in_destructor(cudaEventDestroy(as_event(event)), "cudaEventDestroy"); }

void event_record(int device, void* event, void* stream) {
  CudaDeviceGuard guard(device);
  check(cudaEventRecord(as_event(event), as_stream(stream)), on_device("cudaEventRecord", device));
}

void event_synchronize(int device, void* event) {
  CudaDeviceGuard guard(device);
  check(cudaEventSynchronize(as_event(event)), on_device("cudaEventSynchronize", device));
}

bool event_query(int device, void* event) {
  CudaDeviceGuard guard(device);
  return completed(cudaEventQuery(as_event(event)), on_device("cudaEventQuery", device));
}

float event_elapsed_ms(int device, void* start, void* end) {
  CudaDeviceGuard guard(device);
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, as_event(start), as_event(end)), on_device("cudaEventElapsedTime", device));
  return ms;
}

}  // namespace loom::detail::cuda_rt
