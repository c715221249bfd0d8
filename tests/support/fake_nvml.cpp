// A fake NVML (libnvidia-ml) for the tests, loaded through the same dlopen path as the real one
// (LOOM_NVML_LIBRARY): two devices with scripted readings. Utilisation cycles 30, 60, 90 per
// reading; memory 40 of 80 GiB; 350.5 W; SM clock 1980 MHz, 1755 on every third reading, which is
// throttled (reason 0x4); 65 C; PCIe 1000 KB/s out and 2000 in; NVLink counters growing 1024 and
// 2048 KiB per reading. LOOM_FAKE_NVML_FAIL_INIT=1 makes nvmlInit_v2 fail as without a driver.
#include <climits>
#include <cstdlib>
#include <cstring>

extern "C" {

using nvmlReturn_t = int;
struct nvmlDevice_st {
  unsigned index;
  unsigned readings;
  unsigned long long tx_kib, rx_kib;
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

static nvmlDevice_st devices[2] = {{0, 0, 0, 0}, {1, 0, 0, 0}};
static bool initialised = false;

nvmlReturn_t nvmlInit_v2() {
  const char* fail = std::getenv("LOOM_FAKE_NVML_FAIL_INIT");
  if (fail != nullptr && std::strcmp(fail, "1") == 0) return 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  initialised = true;
  return 0;
}
nvmlReturn_t nvmlShutdown() {
  initialised = false;
  return 0;
}
const char* nvmlErrorString(nvmlReturn_t code) { return code == 9 ? "Driver Not Loaded" : "Unknown Error"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return initialised ? 0 : 1;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (index >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &devices[index];
  return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* device) {
  if (std::strcmp(bus, "0000:07:00.0") == 0) *device = &devices[1];
  else return 6;  // NVML_ERROR_NOT_FOUND
  return 0;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned* index) {
  *index = device->index;
  return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  std::strncpy(name, device->index == 0 ? "Fake H100 80GB HBM3" : "Fake H100 80GB HBM3 (1)", length - 1);
  return 0;
}
// The utilisation call starts a reading: the others report the same reading's values.
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  ++device->readings;
  u->gpu = 30 * ((device->readings - 1) % 3 + 1);
  u->memory = 20;
  return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t* m) {
  m->total = 80ull << 30;
  m->used = 40ull << 30;
  m->free = m->total - m->used;
  return 0;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned* milliwatts) {
  *milliwatts = 350500;
  return 0;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned* mhz) {
  if (type != 1) return 2;
  *mhz = device->readings % 3 == 0 ? 1755 : 1980;
  return 0;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t, int, unsigned* c) {
  *c = 65;
  return 0;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  *reasons = device->readings % 3 == 0 ? 0x4 : 0;
  return 0;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t, int counter, unsigned* kb) {
  *kb = counter == 0 ? 1000 : 2000;
  return 0;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t* values) {
  device->tx_kib += 1024;
  device->rx_kib += 2048;
  for (int i = 0; i < count; ++i) {
    values[i].nvmlReturn = 0;
    if (values[i].fieldId == 138 && values[i].scopeId == UINT_MAX) values[i].value.ull = device->tx_kib;
    else if (values[i].fieldId == 139 && values[i].scopeId == UINT_MAX) values[i].value.ull = device->rx_kib;
    else values[i].nvmlReturn = 2;
  }
  return 0;
}

}  // extern "C"
