// The CUDA runtime seam for builds without CUDA: the status says so, everything else is an error
// that names the build option (no call can reach a GPU that this build cannot drive).
#include <string>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"

namespace loom::detail::cuda_rt {

namespace {
constexpr const char* not_built =
    "this build of loom has no CUDA support (configured with LOOM_CUDA=OFF, or no CUDA toolkit was found)";

[[noreturn]] void unavailable(int device, const char* what) {
  fail(ErrorCategory::cuda, "cannot ", what, " on cuda:", device, ": ", not_built);
}
}  // namespace

CudaRuntimeStatus status() {
  CudaRuntimeStatus result;
  result.reason = not_built;
  return result;
}

CudaDeviceProperties device_properties(int device) { unavailable(device, "query device properties"); }
CudaPeerLink peer_link(int from, int) { unavailable(from, "query peer access"); }
void require_device(int device) { unavailable(device, "use the device"); }
void set_current_device(int device) { unavailable(device, "make it current"); }
void* malloc(int device, std::size_t) { unavailable(device, "allocate memory"); }
void free(int, void*) noexcept {}
void* host_alloc(int device, std::size_t) { unavailable(device, "allocate pinned host memory"); }
void host_free(int, void*) noexcept {}
void memcpy(int device, void*, const void*, std::size_t, void*) { unavailable(device, "copy memory"); }
void fill(int device, void*, std::int64_t, std::uint64_t, std::size_t, void*) { unavailable(device, "fill memory"); }
void* stream_create(int device) { unavailable(device, "create a stream"); }
void stream_destroy(int, void*) noexcept {}
void stream_synchronize(int device, void*) { unavailable(device, "synchronize a stream"); }
bool stream_query(int device, void*) { unavailable(device, "query a stream"); }
void stream_wait_event(int device, void*, void*) { unavailable(device, "wait for an event"); }
void* event_create(int device, bool) { unavailable(device, "create an event"); }
void event_destroy(int, void*) noexcept {}
void event_record(int device, void*, void*) { unavailable(device, "record an event"); }
void event_synchronize(int device, void*) { unavailable(device, "synchronize an event"); }
bool event_query(int device, void*) { unavailable(device, "query an event"); }
float event_elapsed_ms(int device, void*, void*) { unavailable(device, "time events"); }

}  // namespace loom::detail::cuda_rt
