#include "loom/core/allocator.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <mutex>
#include <unordered_map>
#include <new>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"

namespace loom {

namespace {

static_assert(cpu_alignment >= sizeof(std::size_t) + 1, "the block header holds a size and a category byte");

// LOOM_MEMORY_LIMIT, or the reason it is not a size (reported by the first allocation: the
// allocator is built inside noexcept functions, where it must not throw).
std::int64_t limit_from_environment(std::string& problem) noexcept {
  const char* text = std::getenv("LOOM_MEMORY_LIMIT");
  if (text == nullptr || *text == 0) return 0;
  try {
    return parse_memory_size(text, "LOOM_MEMORY_LIMIT");
  } catch (const Error& error) {
    problem = error.detail();
    return 0;
  } catch (const std::exception& error) {
    problem = error.what();
    return 0;
  }
}

class CpuAllocator final : public Allocator {
 public:
  Device device() const noexcept override { return Device::cpu(); }

  // Each block starts with one alignment unit that records its size and category (for the live
  // counts).
  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.device().is_cpu(), "the CPU allocator was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    if (!limit_problem_.empty()) throw Error(ErrorCategory::invalid_argument, limit_problem_);
    const std::int64_t limit = limit_.load();
    if (limit > 0 && live_.load() + static_cast<std::int64_t>(bytes) > limit) over_limit(bytes, limit);
    auto* base = static_cast<unsigned char*>(::operator new(bytes + cpu_alignment, std::align_val_t(cpu_alignment),
                                                            std::nothrow));
    if (base == nullptr) {
      fail(ErrorCategory::out_of_memory, "cannot allocate ", bytes, " bytes on the CPU for ",
           to_string(current_memory_category()), " (", live_.load(), " bytes live)");
    }
    const MemoryCategory category = current_memory_category();
    *reinterpret_cast<std::size_t*>(base) = bytes;
    base[sizeof(std::size_t)] = static_cast<unsigned char>(category);
    count(static_cast<std::int64_t>(bytes), category);
    return base + cpu_alignment;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    auto* base = static_cast<unsigned char*>(ptr) - cpu_alignment;
    count(-static_cast<std::int64_t>(*reinterpret_cast<std::size_t*>(base)),
          static_cast<MemoryCategory>(base[sizeof(std::size_t)]));
    ::operator delete(base, std::align_val_t(cpu_alignment));
  }

  // Host memory from elsewhere (pinned) counts too: the statistics are the process's host memory.
  void count(std::int64_t delta, MemoryCategory category) noexcept {
    raise(live_, peak_, delta);
    const auto c = static_cast<std::size_t>(category);
    raise(live_by_category_[c], peak_by_category_[c], delta);
  }

  void set_limit(std::int64_t bytes) noexcept { limit_.store(bytes); }
  std::int64_t limit() const noexcept { return limit_.load(); }

  CpuMemoryStats stats() const noexcept {
    CpuMemoryStats s{live_.load(), peak_.load(), {}, {}};
    for (std::size_t c = 0; c < memory_category_count; ++c) {
      s.live_by_category[c] = live_by_category_[c].load();
      s.peak_by_category[c] = peak_by_category_[c].load();
    }
    return s;
  }
  void reset_peak() noexcept {
    peak_.store(live_.load());
    for (std::size_t c = 0; c < memory_category_count; ++c) peak_by_category_[c].store(live_by_category_[c].load());
  }

 private:
  static void raise(std::atomic<std::int64_t>& live, std::atomic<std::int64_t>& peak, std::int64_t delta) noexcept {
    const std::int64_t now = live.fetch_add(delta) + delta;
    std::int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }

  [[noreturn]] void over_limit(std::size_t bytes, std::int64_t limit) const {
    std::string live;
    for (std::size_t c = 0; c < memory_category_count; ++c) {
      const std::int64_t b = live_by_category_[c].load();
      if (b == 0) continue;
      live += live.empty() ? "" : ", ";
      live += std::string(to_string(static_cast<MemoryCategory>(c))) + " " + mib(b);
    }
    fail(ErrorCategory::out_of_memory, "out of memory: ", mib(static_cast<std::int64_t>(bytes)), " more of ",
         to_string(current_memory_category()), " would take the CPU's live memory over its limit of ", mib(limit),
         " (LOOM_MEMORY_LIMIT); live now: ", live.empty() ? "nothing" : live);
  }
  static std::string mib(std::int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
  }

  std::string limit_problem_;
  std::atomic<std::int64_t> limit_{limit_from_environment(limit_problem_)};
  std::atomic<std::int64_t> live_{0}, peak_{0};
  std::array<std::atomic<std::int64_t>, memory_category_count> live_by_category_{}, peak_by_category_{};
};

std::shared_ptr<CpuAllocator> shared_cpu_allocator() {
  static const std::shared_ptr<CpuAllocator> instance = std::make_shared<CpuAllocator>();
  return instance;
}

class CudaDirectAllocator final : public Allocator {
 public:
  explicit CudaDirectAllocator(int device_index) : device_(Device::cuda(device_index)) {
    detail::cuda_rt::require_device(device_index);
  }

  Device device() const noexcept override { return device_; }

  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.is_default() || stream.device() == device_, "the allocator for ", device_,
            " was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    void* ptr = detail::cuda_rt::malloc(device_.index(), bytes);
    if (ptr == nullptr) fail(ErrorCategory::out_of_memory, "cudaMalloc of ", bytes, " bytes on ", device_);
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr != nullptr) detail::cuda_rt::free(device_.index(), ptr);
  }

 private:
  Device device_;
};

// Page-locked host memory (cudaHostAlloc): copies between it and the GPU run at full PCIe/NVLink
// speed and can be asynchronous. Counted in cpu_memory_stats() like any host memory.
class PinnedHostAllocator final : public Allocator {
 public:
  explicit PinnedHostAllocator(int device_index) : device_index_(device_index) {
    detail::cuda_rt::require_device(device_index);
  }

  Device device() const noexcept override { return Device::cpu(); }

  void* allocate(std::size_t bytes, StreamRef stream) override {
    require(stream.is_default() || stream.device() == Device::cuda(device_index_), "the pinned host allocator for cuda:",
            device_index_, " was given a stream on ", stream.device());
    if (bytes == 0) return nullptr;
    void* ptr = detail::cuda_rt::host_alloc(device_index_, bytes);
    if (ptr == nullptr) fail(ErrorCategory::out_of_memory, "cudaHostAlloc of ", bytes, " bytes (pinned host memory)");
    const MemoryCategory category = current_memory_category();
    const std::lock_guard lock(mutex_);
    sizes_[ptr] = {bytes, category};
    shared_cpu_allocator()->count(static_cast<std::int64_t>(bytes), category);
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    Held held;
    {
      const std::lock_guard lock(mutex_);
      const auto it = sizes_.find(ptr);
      require(it != sizes_.end(), "the pinned host allocator was given memory it did not allocate");
      held = it->second;
      sizes_.erase(it);
    }
    detail::cuda_rt::host_free(device_index_, ptr);
    shared_cpu_allocator()->count(-static_cast<std::int64_t>(held.bytes), held.category);
  }

 private:
  struct Held {
    std::size_t bytes = 0;
    MemoryCategory category = MemoryCategory::other;
  };
  int device_index_;
  std::mutex mutex_;
  std::unordered_map<void*, Held> sizes_;
};

}  // namespace

std::shared_ptr<Allocator> pinned_host_allocator(int device_index) {
  return std::make_shared<PinnedHostAllocator>(device_index);
}

std::shared_ptr<Allocator> cpu_allocator() { return shared_cpu_allocator(); }

CpuMemoryStats cpu_memory_stats() noexcept { return shared_cpu_allocator()->stats(); }

void set_cpu_memory_limit(std::int64_t bytes) {
  require(bytes >= 0, "the CPU memory limit must be zero (none) or positive, got ", bytes);
  shared_cpu_allocator()->set_limit(bytes);
}

std::int64_t cpu_memory_limit() noexcept { return shared_cpu_allocator()->limit(); }

std::int64_t parse_memory_size(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() ? 1.0 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
                     : unit == "G" ? 1073741824.0 : unit == "T" ? 1099511627776.0 : 0.0;
  const double bytes = value * scale;  // (NaN fails every comparison)
  require(used > 0 && scale > 0 && bytes >= 1 && bytes < 9.2e18, what, ": '", text,
          "' is not a size such as 512M, 2G or a byte count (at least 1 byte, under 8 EiB)");
  return static_cast<std::int64_t>(bytes);
}

void reset_cpu_memory_peak() noexcept { shared_cpu_allocator()->reset_peak(); }

std::shared_ptr<Allocator> cuda_direct_allocator(int device_index) {
  return std::make_shared<CudaDirectAllocator>(device_index);
}

std::shared_ptr<Allocator> default_allocator(Device device) {
  return device.is_cpu() ? cpu_allocator() : cuda_direct_allocator(device.index());
}

}  // namespace loom
