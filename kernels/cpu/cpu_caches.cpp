// The CPU's data caches (loom/kernels/cpu_caches.hpp). CPUID's deterministic cache leaves give every
// level's geometry directly (ways x partitions x line x sets); Linux's sysfs says the same where
// CPUID is unavailable (other architectures, some hypervisors). Only data and unified caches count.
#include "loom/kernels/cpu_caches.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "loom/core/allocator.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels {

namespace {

CpuCache* level(CpuCaches& caches, int number) {
  switch (number) {
    case 1: return &caches.l1d;
    case 2: return &caches.l2;
    case 3: return &caches.l3;
    default: return nullptr;
  }
}

#if defined(__x86_64__)
// Leaf 4 (Intel) and 0x8000001D (AMD) share one layout: EAX type and level and the sharing count,
// EBX ways, partitions and line size, ECX sets.
bool from_cpuid(CpuCaches& caches) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned max_leaf = eax;
  const bool amd = ebx == 0x68747541 || ebx == 0x6f677948;  // "Auth"enticAMD, "Hygo"nGenuine
  unsigned leaf = 4;
  if (amd) {
    // AMD's leaf exists with the topology extensions (CPUID 0x80000001 ECX bit 22).
    if (!__get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 22))) return false;
    leaf = 0x8000001D;
  } else if (max_leaf < 4) {
    return false;
  }
  bool any = false;
  for (unsigned index = 0; index < 16; ++index) {
    __cpuid_count(leaf, index, eax, ebx, ecx, edx);
    const unsigned type = eax & 0x1f;  // 0 none (the end), 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    if (type == 2) continue;
    CpuCache* cache = level(caches, static_cast<int>((eax >> 5) & 0x7));
    if (cache == nullptr) continue;
    const std::int64_t ways = ((ebx >> 22) & 0x3ff) + 1, partitions = ((ebx >> 12) & 0x3ff) + 1;
    const std::int64_t line = (ebx & 0xfff) + 1, sets = static_cast<std::int64_t>(ecx) + 1;
    cache->bytes = ways * partitions * line * sets;
    // A fully associative cache (EAX bit 9) has no meaningful way count.
    cache->ways = (eax & (1u << 9)) ? 0 : static_cast<int>(ways);
    cache->shared_by = static_cast<int>(((eax >> 14) & 0xfff) + 1);
    any = true;
  }
  return any && caches.l1d.bytes > 0 && caches.l2.bytes > 0;
}
#endif

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "0-3,8-11" -> 8
int count_cpus(const std::string& list) {
  int count = 0;
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t comma = list.find(',', at);
    const std::string part = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const std::size_t dash = part.find('-');
    count += dash == std::string::npos ? 1 : std::atoi(part.c_str() + dash + 1) - std::atoi(part.c_str()) + 1;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return count > 0 ? count : 1;
}

bool from_sysfs(CpuCaches& caches) {
  bool any = false;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string type = read_line(dir + "type");
    if (type.empty()) break;
    if (type == "Instruction") continue;
    CpuCache* cache = level(caches, std::atoi(read_line(dir + "level").c_str()));
    const std::string size = read_line(dir + "size");  // "48K"
    if (cache == nullptr || size.empty()) continue;
    try {
      cache->bytes = parse_memory_size(size, dir + "size");
    } catch (const Error&) {
      continue;
    }
    cache->ways = std::atoi(read_line(dir + "ways_of_associativity").c_str());
    cache->shared_by = count_cpus(read_line(dir + "shared_cpu_list"));
    any = true;
  }
  return any && caches.l1d.bytes > 0 && caches.l2.bytes > 0;
}

std::string size_text(std::int64_t bytes) {
  char text[32];
  const auto count = static_cast<long long>(bytes);
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) {
    std::snprintf(text, sizeof text, "%lld MiB", count >> 20);
  } else if (bytes >= 1024 && bytes % 1024 == 0) {
    std::snprintf(text, sizeof text, "%lld KiB", count >> 10);
  } else {
    std::snprintf(text, sizeof text, "%lld B", count);
  }
  return text;
}

}  // namespace

CpuCaches detect_cpu_caches() {
#if defined(__x86_64__)
  CpuCaches cpuid;
  if (from_cpuid(cpuid)) {
    cpuid.source = "cpuid";
    return cpuid;
  }
#endif
  CpuCaches sysfs;
  if (from_sysfs(sysfs)) {
    sysfs.source = "sysfs";
    return sysfs;
  }
  // Neither: a small modern core, so the blocking errs towards fitting.
  return {{32 << 10, 8, 1}, {512 << 10, 8, 1}, {8 << 20, 16, 1}, "assumed"};
}

CpuCaches parse_cpu_caches(std::string_view spec, CpuCaches base) {
  const std::string text(spec);
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const std::size_t equals = item.find('=');
    require(equals != std::string::npos, "cache spec '", text, "': '", item,
            "' is not LEVEL=SIZE[/WAYS[/SHARED_BY]] (e.g. l1d=32K/8,l2=512K/8,l3=32M)");
    const std::string name = item.substr(0, equals);
    CpuCache* cache = name == "l1d" ? &base.l1d : name == "l2" ? &base.l2 : name == "l3" ? &base.l3 : nullptr;
    require(cache != nullptr, "cache spec '", text, "': unknown level '", name, "'; use l1d, l2 or l3");
    // SIZE, then the optional WAYS and SHARED_BY.
    std::vector<std::string> fields;
    for (std::size_t from = equals + 1;;) {
      const std::size_t slash = item.find('/', from);
      fields.push_back(item.substr(from, slash == std::string::npos ? std::string::npos : slash - from));
      if (slash == std::string::npos) break;
      from = slash + 1;
    }
    require(fields.size() <= 3, "cache spec '", text, "': '", item, "' has more than SIZE/WAYS/SHARED_BY");
    if (name == "l3" && fields[0] == "0") {
      cache->bytes = 0;
    } else {
      cache->bytes = parse_memory_size(fields[0], "cache spec '" + text + "': " + name);
      require(cache->bytes >= 1024, "cache spec '", text, "': ", name, " of ", cache->bytes,
              " bytes is smaller than 1 KiB; no CPU has such a cache");
    }
    auto whole_number = [&](const std::string& field, const char* what, long most) {
      char* end = nullptr;
      const long parsed = std::strtol(field.c_str(), &end, 10);
      require(!field.empty() && end != nullptr && *end == 0 && parsed >= 1 && parsed <= most, "cache spec '", text,
              "': ", name, " ", what, " '", field, "' is not a whole number from 1 to ", most);
      return static_cast<int>(parsed);
    };
    if (fields.size() > 1) cache->ways = whole_number(fields[1], "ways", 64);
    // A level described here is another CPU's: its sharing is its own, one CPU unless given.
    cache->shared_by = fields.size() > 2 ? whole_number(fields[2], "shared by", 4096) : 1;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return base;
}

const CpuCaches& cpu_caches() {
  static const CpuCaches caches = [] {
    CpuCaches detected = detect_cpu_caches();
    const char* spec = std::getenv("LOOM_CPU_CACHES");
    if (spec == nullptr || *spec == 0) return detected;
    try {
      detected = parse_cpu_caches(spec, detected);
    } catch (const Error& error) {
      fail(ErrorCategory::invalid_argument, "LOOM_CPU_CACHES=", spec, ": ", error.detail());
    }
    detected.source += " + LOOM_CPU_CACHES";
    return detected;
  }();
  return caches;
}

std::string describe(const CpuCaches& caches) {
  auto one = [](const char* name, const CpuCache& cache) {
    std::string text = name;
    text += ' ';
    text += cache.bytes > 0 ? size_text(cache.bytes) : std::string("none");
    if (cache.bytes > 0 && cache.ways > 0) {
      text += ' ';
      text += std::to_string(cache.ways);
      text += "-way";
    }
    if (cache.bytes > 0 && cache.shared_by > 1) {
      text += " shared by ";
      text += std::to_string(cache.shared_by);
    }
    return text;
  };
  return one("L1d", caches.l1d) + ", " + one("L2", caches.l2) + ", " + one("L3", caches.l3) + " (" + caches.source +
         ")";
}

}  // namespace loom::kernels
