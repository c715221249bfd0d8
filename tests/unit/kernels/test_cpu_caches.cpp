// The CPU cache description the GEMM's blocking is chosen from (kernels/cpu/cpu_caches.cpp):
// LOOM_CPU_CACHES's grammar and its errors against crafted specs, and what CPUID reports against
// what Linux's sysfs reports for the same CPU (read here independently).
#include <catch2/catch.hpp>

#include <cstdlib>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <fstream>
#include <sched.h>
#include <string>

#include "loom/core/error.hpp"
#include "loom/kernels/cpu_caches.hpp"

using loom::kernels::CpuCache;
using loom::kernels::CpuCaches;
using loom::kernels::parse_cpu_caches;

namespace {

CpuCaches base() { return {{48 << 10, 12, 1}, {2 << 20, 16, 1}, {300 << 20, 20, 2}, "test"}; }

std::string parse_error(const std::string& spec) {
  try {
    parse_cpu_caches(spec, base());
  } catch (const loom::Error& error) {
    REQUIRE(error.category() == loom::ErrorCategory::invalid_argument);
    return error.what();
  }
  FAIL("no error for '" << spec << "'");
  return {};
}

// sysfs's size of the cache of this CPU at this level ("Data" or "Unified"), 0 when not listed.
std::int64_t sysfs_bytes(int cpu, int level) {
  for (int index = 0; index < 16; ++index) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/";
    std::ifstream type_file(dir + "type"), level_file(dir + "level"), size_file(dir + "size");
    std::string type, size;
    int at = 0;
    if (!(type_file >> type)) break;
    if (!(level_file >> at) || !(size_file >> size) || type == "Instruction" || at != level) continue;
    const std::int64_t scale = size.back() == 'K' ? 1024 : size.back() == 'M' ? 1 << 20 : 1;
    return std::atoll(size.c_str()) * scale;
  }
  return 0;
}

// The brand string CPUID gives this process, and the model name Linux read at boot.
std::string cpuid_brand() {
  std::string brand;
#if defined(__x86_64__)
  unsigned regs[4] = {};
  for (unsigned leaf = 0x80000002; leaf <= 0x80000004; ++leaf) {
    if (!__get_cpuid(leaf, &regs[0], &regs[1], &regs[2], &regs[3])) return "";
    brand.append(reinterpret_cast<const char*>(regs), sizeof regs);
  }
#endif
  brand = brand.c_str();  // up to the first NUL
  const std::size_t first = brand.find_first_not_of(' '), last = brand.find_last_not_of(' ');
  return first == std::string::npos ? "" : brand.substr(first, last - first + 1);
}

std::string cpuinfo_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "";
}

}  // namespace

TEST_CASE("a cache spec replaces the levels it names and keeps the rest", "[kernels][caches]") {
  const CpuCaches zen3 = parse_cpu_caches("l1d=32K/8,l2=512K/8,l3=32M", base());
  REQUIRE(zen3.l1d == CpuCache{32 << 10, 8, 1});
  REQUIRE(zen3.l2 == CpuCache{512 << 10, 8, 1});
  REQUIRE(zen3.l3 == CpuCache{32 << 20, 20, 1});  // no WAYS: the base's; no SHARED_BY: 1
  REQUIRE(parse_cpu_caches("l2=1M/16/2", base()).l2 == CpuCache{1 << 20, 16, 2});
  const CpuCaches no_l3 = parse_cpu_caches("l3=0", base());
  REQUIRE(no_l3.l3.bytes == 0);
  REQUIRE(no_l3.l1d == base().l1d);
  REQUIRE(parse_cpu_caches("l2=1048576", base()).l2.bytes == 1 << 20);
}

TEST_CASE("a bad cache spec is an error that names what is wrong", "[kernels][caches]") {
  CHECK_THAT(parse_error("l4=1M"), Catch::Contains("unknown level 'l4'"));
  CHECK_THAT(parse_error("l1d"), Catch::Contains("'l1d' is not LEVEL=SIZE[/WAYS[/SHARED_BY]]"));
  CHECK_THAT(parse_error("l2=512K/8/0"), Catch::Contains("l2 shared by '0' is not a whole number from 1 to 4096"));
  CHECK_THAT(parse_error("l2=1M/8/2/3"), Catch::Contains("'l2=1M/8/2/3' has more than SIZE/WAYS/SHARED_BY"));
  CHECK_THAT(parse_error("l2=lots"), Catch::Contains("l2: 'lots' is not a size"));
  CHECK_THAT(parse_error("l1d=512"), Catch::Contains("l1d of 512 bytes is smaller than 1 KiB"));
  CHECK_THAT(parse_error("l2=512K/0"), Catch::Contains("l2 ways '0' is not a whole number from 1 to 64"));
  CHECK_THAT(parse_error("l2=512K/8x"), Catch::Contains("l2 ways '8x'"));
  CHECK_THAT(parse_error("l1d=0"), Catch::Contains("l1d: '0' is not a size"));
}

TEST_CASE("the detected caches are plausible and agree with Linux's sysfs", "[kernels][caches]") {
  // CPUID describes the core it runs on (a hybrid CPU's cores differ): read it on one known CPU.
  CpuCaches caches;
  int cpu = -1;
  for (int attempt = 0; attempt < 10 && cpu < 0; ++attempt) {
    const int before = sched_getcpu();
    caches = loom::kernels::detect_cpu_caches();
    if (before >= 0 && sched_getcpu() == before) cpu = before;
  }
  INFO(loom::kernels::describe(caches));
  REQUIRE(caches.l1d.bytes >= 4096);
  REQUIRE(caches.l2.bytes >= caches.l1d.bytes);
  REQUIRE((caches.l3.bytes == 0 || caches.l3.bytes >= caches.l2.bytes));
  REQUIRE(caches.l1d.shared_by >= 1);
  // The kernel fills sysfs from its own reading of the CPU: both must give the same sizes, unless
  // this process runs on another CPU than the kernel's (qemu's user-mode emulation in
  // tests/portable reports the emulated CPU through CPUID and the host's through sysfs).
  INFO("CPUID's CPU: " << cpuid_brand() << "; the kernel's: " << cpuinfo_model());
  if (caches.source == "cpuid" && cpu >= 0 && cpuid_brand() == cpuinfo_model()) {
    for (const auto& [level, bytes] : {std::pair{1, caches.l1d.bytes}, std::pair{2, caches.l2.bytes}}) {
      const std::int64_t listed = sysfs_bytes(cpu, level);
      INFO("cpu " << cpu << " level " << level);
      if (listed > 0) REQUIRE(bytes == listed);
    }
  }
}

TEST_CASE("a cache description names every level, its ways and its sharing", "[kernels][caches]") {
  REQUIRE(loom::kernels::describe(base()) ==
          "L1d 48 KiB 12-way, L2 2 MiB 16-way, L3 300 MiB 20-way shared by 2 (test)");
  REQUIRE(loom::kernels::describe(parse_cpu_caches("l3=0,l2=1536K", base())) ==
          "L1d 48 KiB 12-way, L2 1536 KiB 16-way, L3 none (test)");
}
