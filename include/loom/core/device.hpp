// Where a tensor lives: the CPU or one CUDA device.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

namespace loom {

enum class DeviceType : unsigned char { cpu, cuda };

class Device {
 public:
  constexpr Device() noexcept = default;  // the CPU
  static constexpr Device cpu() noexcept { return Device(); }
  static Device cuda(int index = 0);  // throws invalid_argument for a negative index

  // "cpu", "cuda" (device 0) or "cuda:N".
  static Device parse(std::string_view text);

  constexpr DeviceType type() const noexcept { return type_; }
  constexpr int index() const noexcept { return index_; }
  constexpr bool is_cpu() const noexcept { return type_ == DeviceType::cpu; }
  constexpr bool is_cuda() const noexcept { return type_ == DeviceType::cuda; }
  std::string to_string() const;  // "cpu" or "cuda:N"

  friend constexpr bool operator==(Device, Device) noexcept = default;

 private:
  constexpr Device(DeviceType type, int index) noexcept : type_(type), index_(index) {}
  DeviceType type_ = DeviceType::cpu;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& out, Device device);

}  // namespace loom
