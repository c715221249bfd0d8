#include "loom/core/shape.hpp"

#include <limits>
#include <ostream>

#include "loom/core/error.hpp"

namespace loom {

Shape::Shape(std::initializer_list<std::int64_t> extents) : Shape(std::vector<std::int64_t>(extents)) {}

Shape::Shape(std::vector<std::int64_t> extents) : extents_(std::move(extents)) {
  std::int64_t numel = 1;
  for (std::size_t dim = 0; dim < extents_.size(); ++dim) {
    const std::int64_t extent = extents_[dim];
    if (extent < 0) {
      extents_.clear();
      fail(ErrorCategory::invalid_argument, "shape extent ", dim, " is negative (", extent, ")");
    }
    if (extent != 0 && numel > std::numeric_limits<std::int64_t>::max() / extent) {
      fail(ErrorCategory::invalid_argument, "shape ", to_string(), " has more than 2^63-1 elements");
    }
    numel *= extent;
  }
  numel_ = numel;
}

std::int64_t Shape::operator[](std::int64_t dim) const {
  const std::int64_t resolved = dim < 0 ? dim + rank() : dim;
  require(resolved >= 0 && resolved < rank(), "dimension ", dim, " is out of range for shape ",
          to_string(), " of rank ", rank());
  return extents_[static_cast<std::size_t>(resolved)];
}

std::string Shape::to_string() const {
  std::string text = "(";
  for (std::size_t dim = 0; dim < extents_.size(); ++dim) {
    if (dim > 0) text += ", ";
    text += std::to_string(extents_[dim]);
  }
  return text + ")";
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape.to_string(); }

}  // namespace loom
