// CUDA_VISIBLE_DEVICES read the way the CUDA driver reads it, so that loom can say which GPUs a job
// may use and check that it uses no other. The value is a comma-separated list of selectors, in the
// order CUDA enumerates the devices: an integer index ("2"), a GPU UUID as nvidia-smi -L prints it
// or any prefix of one long enough to be unique ("GPU-8932f937"), a MIG device's UUID
// ("MIG-c6d4f1ef-..."), or the legacy MIG form "MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>".
// The first entry that is none of these ends the list: CUDA ignores it and everything after it.
// Unset means every GPU; an empty value means none.
//
// Parsing is pure: which physical GPU an integer names (CUDA's order, CUDA_DEVICE_ORDER) and
// whether a UUID prefix is unique are the driver's business. loom never maps an integer selector
// to an NVML index itself; it identifies the GPU a CUDA device is by its UUID.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct VisibleDeviceSelector {
  enum class Kind { index, gpu_uuid, mig_uuid, mig_legacy };
  Kind kind = Kind::index;
  std::string text;  // the entry as written (spaces around it removed)
  int index = -1;    // Kind::index
  // gpu_uuid, mig_uuid: the UUID (or prefix) with its "GPU-"/"MIG-" prefix, hex digits lower-case.
  // mig_legacy: the parent GPU's full "GPU-..." UUID.
  std::string uuid;
  unsigned gpu_instance = 0, compute_instance = 0;  // mig_legacy

  // Whether this selector names the device with this full UUID ("GPU-..." or "MIG-...", any case)
  // by UUID: a prefix match of the same kind. Index and legacy selectors name no UUID: false.
  bool names_uuid(std::string_view full_uuid) const;
};

struct VisibleDevices {
  bool all = true;  // CUDA_VISIBLE_DEVICES unset: every GPU of the host
  std::string value;  // the value as set (empty when unset)
  std::vector<VisibleDeviceSelector> selectors;  // CUDA's enumeration order (cuda:0 first)
  std::string ignored;  // from the first invalid entry to the end: what CUDA ignores ("" if none)

  bool none() const { return !all && selectors.empty(); }
  // "CUDA_VISIBLE_DEVICES unset (every GPU)", "CUDA_VISIBLE_DEVICES=2,0", with
  // " (CUDA ignores '-1,3')" when part of the value is invalid, or "... (no GPU)" when empty.
  std::string describe() const;
};

// value: the variable's value, or nullopt when it is unset.
VisibleDevices parse_visible_devices(std::optional<std::string_view> value);
// The same for this process's environment.
VisibleDevices visible_devices_from_environment();

// 16 UUID bytes (cudaDeviceProp::uuid) as "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower-case hex,
// without a "GPU-" or "MIG-" prefix: the same bytes name a GPU or a MIG instance, which only NVML
// can tell apart.
std::string format_uuid(const std::array<unsigned char, 16>& bytes);

// "GPU-xxxx..." -> "xxxx..." (also "MIG-"); any other text is returned as it is. Lower-case.
std::string uuid_digits(std::string_view uuid);

}  // namespace loom
