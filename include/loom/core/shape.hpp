// Tensor shapes: a list of non-negative 64-bit extents whose product fits in int64.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

namespace loom {

class Shape {
 public:
  Shape() = default;  // rank 0: a scalar with one element
  Shape(std::initializer_list<std::int64_t> extents);
  explicit Shape(std::vector<std::int64_t> extents);

  std::int64_t rank() const noexcept { return static_cast<std::int64_t>(extents_.size()); }
  std::int64_t numel() const noexcept { return numel_; }
  std::int64_t operator[](std::int64_t dim) const;  // checked; negative dims count from the end
  const std::vector<std::int64_t>& extents() const noexcept { return extents_; }
  std::string to_string() const;  // "(2, 3)"; "()" for a scalar

  friend bool operator==(const Shape& a, const Shape& b) noexcept { return a.extents_ == b.extents_; }

 private:
  std::vector<std::int64_t> extents_;
  std::int64_t numel_ = 1;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

}  // namespace loom
