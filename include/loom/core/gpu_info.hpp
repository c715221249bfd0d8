// What the CUDA runtime can see on this machine. Never throws for "no GPU": a build without CUDA,
// a machine without a driver and a machine without devices all answer with a reason.
#pragma once

#include <cstddef>
#include <string>

namespace loom {

struct CudaRuntimeStatus {
  bool compiled = false;     // this build of loom contains the CUDA path
  int device_count = 0;      // usable CUDA devices (0 when none, or no driver)
  int driver_version = 0;    // e.g. 13000 for CUDA 13.0; 0 when there is no driver
  int runtime_version = 0;   // the CUDA runtime loom was linked with; 0 without CUDA
  std::string reason;        // why there is no usable GPU; empty when device_count > 0

  bool available() const noexcept { return device_count > 0; }
};

CudaRuntimeStatus cuda_runtime_status();

struct CudaDeviceProperties {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t total_memory_bytes = 0;
  int multiprocessor_count = 0;
  std::string pci_bus_id;  // "0000:07:00.0" (domain:bus:device.function, lower-case hex)
  // cudaDeviceProp::uuid as "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (format_uuid, visible_devices.hpp),
  // without a prefix: for a whole GPU nvidia-smi prints it as "GPU-...", for a MIG instance (where
  // CUDA reports the instance's own UUID) as "MIG-..."; only NVML tells which.
  std::string uuid;
};

// Throws a cuda Error naming the index and the device count when the device does not exist.
CudaDeviceProperties cuda_device_properties(int index);

// What CUDA's peer-to-peer attributes say about GPU `from` reaching GPU `to` directly.
struct CudaPeerLink {
  bool access = false;          // cudaDevP2PAttrAccessSupported
  bool native_atomics = false;  // cudaDevP2PAttrNativeAtomicSupported: NVLink offers them, PCIe does not
  int performance_rank = -1;    // cudaDevP2PAttrPerformanceRank: lower is faster (-1 without access)
};
// Throws a cuda Error for a device that does not exist (or a build without CUDA).
CudaPeerLink cuda_peer_link(int from, int to);

// Makes cuda:index this process's current device (cudaSetDevice). loom::init calls it once per
// process, so that every later CUDA call of this rank, including ones that restore "the previous
// device" after a guard, creates its context on its own GPU rather than on GPU 0 (where 8 ranks
// would put 8 contexts, and EXCLUSIVE_PROCESS mode would refuse ranks 1-7).
void set_current_cuda_device(int index);

}  // namespace loom
