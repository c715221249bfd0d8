#include "loom/core/device.hpp"

#include <charconv>
#include <ostream>

#include "loom/core/error.hpp"

namespace loom {

Device Device::cuda(int index) {
  require(index >= 0, "CUDA device index must be >= 0, got ", index);
  return Device(DeviceType::cuda, index);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (text.starts_with(prefix)) {
    const std::string_view digits = text.substr(prefix.size());
    int index = -1;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) {
      return cuda(index);
    }
  }
  fail(ErrorCategory::invalid_argument, "cannot parse device '", text,
       "'; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0");
}

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& out, Device device) { return out << device.to_string(); }

}  // namespace loom
