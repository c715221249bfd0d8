// A fake NVML (libnvidia-ml) for the tests, loaded through the same dlopen path as the real one
// (LOOM_NVML_LIBRARY): two devices (three with LOOM_FAKE_NVML_DEVICES=3) with scripted readings.
// Utilisation cycles 30, 60, 90 per reading; memory 40 of 80 GiB; 350.5 W; SM clock 1980 MHz, 1755
// on every third reading, which is throttled (reason 0x4); 65 C; PCIe 1000 KB/s out and 2000 in;
// NVLink counters growing 1024 and 2048 KiB per reading. Device i has the UUID
// GPU-f<i>..., bus id 0000:0<5+2i>:00.0. LOOM_FAKE_NVML_MIG=1 puts device 1 in MIG mode with one
// MIG device, at MIG index 1 (MIG-c1000000-...), which reports memory only (4 of 10 GiB), as NVML
// does per instance; device 1 itself then reports no utilisation. LOOM_FAKE_NVML_FAIL_INIT=1 makes
// nvmlInit_v2 fail as without a driver. loom_fake_nvml_handles(i) counts the handles given out for
// device i (index 3: the MIG device), so that tests can check which devices loom touched.
#include <climits>
#include <cstdlib>
#include <cstring>

extern "C" {

using nvmlReturn_t = int;
struct nvmlDevice_st {
  unsigned index;
  const char* name;
  const char* uuid;
  const char* bus;
  bool mig;  // a MIG device handle (its parent: device 1)
  unsigned readings;
  unsigned long long tx_kib, rx_kib;
  unsigned handles;
};
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlFieldValue_t {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  union {
    double d;
    unsigned long long ull;
  } value;
};

constexpr nvmlReturn_t ok = 0, uninitialized = 1, invalid_argument = 2, not_supported = 3, not_found = 6;
static nvmlDevice_st devices[4] = {
    {0, "Fake H100 80GB HBM3", "GPU-f0000000-0000-4000-8000-000000000000", "0000:05:00.0", false, 0, 0, 0, 0},
    {1, "Fake H100 80GB HBM3 (1)", "GPU-f1111111-1111-4111-8111-111111111111", "0000:07:00.0", false, 0, 0, 0, 0},
    {2, "Fake H100 80GB HBM3 (2)", "GPU-f2222222-2222-4222-8222-222222222222", "0000:09:00.0", false, 0, 0, 0, 0},
    {1, "Fake H100 80GB HBM3 MIG 1g.10gb", "MIG-c1000000-0000-4000-8000-000000000001", "0000:07:00.0", true, 0, 0, 0, 0},
};
static nvmlDevice_st& mig_device = devices[3];
static int initialised = 0;  // nvmlInit_v2 calls less nvmlShutdown calls, as NVML counts them
static unsigned count = 2;
static bool mig_mode = false;

static bool env_is(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}
static nvmlReturn_t give(nvmlDevice_st& device, nvmlDevice_t* out) {
  ++device.handles;
  *out = &device;
  return ok;
}
static bool mig_active(nvmlDevice_t device) { return mig_mode && (device->mig || device->index == 1); }

unsigned loom_fake_nvml_handles(unsigned index) { return index < 4 ? devices[index].handles : 0; }

nvmlReturn_t nvmlInit_v2() {
  if (env_is("LOOM_FAKE_NVML_FAIL_INIT", "1")) return 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  if (initialised++ > 0) return ok;  // a second user in the process shares the first one's state
  count = env_is("LOOM_FAKE_NVML_DEVICES", "3") ? 3 : 2;
  mig_mode = env_is("LOOM_FAKE_NVML_MIG", "1");
  for (nvmlDevice_st& d : devices) d.handles = d.readings = 0, d.tx_kib = d.rx_kib = 0;
  return ok;
}
nvmlReturn_t nvmlShutdown() {
  if (initialised > 0) --initialised;
  return ok;
}
const char* nvmlErrorString(nvmlReturn_t code) {
  switch (code) {
    case 9: return "Driver Not Loaded";
    case not_found: return "Not Found";
    case not_supported: return "Not Supported";
    default: return "Unknown Error";
  }
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
  *n = count;
  return initialised > 0 ? ok : uninitialized;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (index >= count) return invalid_argument;
  return give(devices[index], device);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* device) {
  for (unsigned i = 0; i < count; ++i) {
    if (std::strcmp(bus, devices[i].bus) == 0) return give(devices[i], device);
  }
  return not_found;
}
// Whole GPUs only, as some drivers do: a MIG device is found through its parent.
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  for (unsigned i = 0; i < count; ++i) {
    if (std::strcmp(uuid, devices[i].uuid) == 0) return give(devices[i], device);
  }
  return not_found;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  std::strncpy(uuid, device->uuid, length - 1);
  return ok;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned* index) {
  if (device->mig) return not_supported;
  *index = device->index;
  return ok;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  std::strncpy(name, device->name, length - 1);
  return ok;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned* current, unsigned* pending) {
  if (device->mig) return not_supported;
  *current = *pending = mig_mode && device->index == 1 ? 1 : 0;
  return ok;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned* n) {
  *n = device->mig ? 0 : 7;
  return ok;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index, nvmlDevice_t* mig) {
  if (!mig_mode || device->mig || device->index != 1) return not_supported;
  if (index >= 7) return invalid_argument;
  if (index != 1) return not_found;  // no compute instance there
  return give(mig_device, mig);
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t* device) {
  if (!mig->mig) return invalid_argument;
  return give(devices[1], device);
}
// The utilisation call starts a reading: the others report the same reading's values.
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  ++device->readings;
  if (mig_active(device)) return not_supported;
  u->gpu = 30 * ((device->readings - 1) % 3 + 1);
  u->memory = 20;
  return ok;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* m) {
  m->total = (device->mig ? 10ull : 80ull) << 30;
  m->used = (device->mig ? 4ull : 40ull) << 30;
  m->free = m->total - m->used;
  return ok;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* milliwatts) {
  if (device->mig) return not_supported;
  *milliwatts = 350500;
  return ok;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned* mhz) {
  if (device->mig) return not_supported;
  if (type != 1) return invalid_argument;
  *mhz = device->readings % 3 == 0 ? 1755 : 1980;
  return ok;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int, unsigned* c) {
  if (device->mig) return not_supported;
  *c = 65;
  return ok;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  if (device->mig) return not_supported;
  *reasons = device->readings % 3 == 0 ? 0x4 : 0;
  return ok;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned* kb) {
  if (device->mig) return not_supported;
  *kb = counter == 0 ? 1000 : 2000;
  return ok;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int n, nvmlFieldValue_t* values) {
  if (device->mig) return not_supported;
  device->tx_kib += 1024;
  device->rx_kib += 2048;
  for (int i = 0; i < n; ++i) {
    values[i].nvmlReturn = ok;
    if (values[i].fieldId == 138 && values[i].scopeId == UINT_MAX) values[i].value.ull = device->tx_kib;
    else if (values[i].fieldId == 139 && values[i].scopeId == UINT_MAX) values[i].value.ull = device->rx_kib;
    else values[i].nvmlReturn = invalid_argument;
  }
  return ok;
}

}  // extern "C"
