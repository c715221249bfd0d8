#include "loom/core/tensor.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <ostream>

#include "cuda_runtime.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom {

Storage::Storage(void* data, std::size_t bytes, Device device, Release release)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (!release_) return;
  try {
    release_(data_);
  } catch (const std::exception& error) {
    // Destructors never throw; a failed release means a bookkeeping bug worth seeing.
    std::fprintf(stderr, "loom: releasing %zu bytes on %s failed: %s\n", bytes_,
                 device_.to_string().c_str(), error.what());
  } catch (...) {
    std::fprintf(stderr, "loom: releasing %zu bytes on %s failed with a non-standard exception\n", bytes_,
                 device_.to_string().c_str());
  }
}

namespace {
// Bytes for shape x dtype; an invalid_argument Error when that does not fit in 63 bits.
std::size_t storage_bytes(const Shape& shape, DType dtype) {
  const auto element = static_cast<std::int64_t>(dtype_size(dtype));
  require(shape.numel() <= std::numeric_limits<std::int64_t>::max() / element, "a ", dtype, " tensor of shape ",
          shape, " needs more than 2^63-1 bytes");
  return static_cast<std::size_t>(shape.numel() * element);
}
}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, std::size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_bytes_(offset_bytes), shape_(std::move(shape)), dtype_(dtype) {}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, default_allocator(device), StreamRef(device, nullptr));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, std::shared_ptr<Allocator> allocator, StreamRef stream) {
  require(allocator != nullptr, "Tensor::empty was given a null allocator");
  const Device device = allocator->device();
  const std::size_t bytes = storage_bytes(shape, dtype);
  void* data = allocator->allocate(bytes, stream);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(data, bytes, device, [allocator](void* ptr) { allocator->deallocate(ptr); });
  } catch (...) {
    allocator->deallocate(data);
    throw;
  }
  return Tensor(std::move(storage), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, dtype, 0.0, device); }

Tensor Tensor::full(const Shape& shape, DType dtype, double value, Device device) {
  Tensor tensor = empty(shape, dtype, device);
  fill(tensor, value);
  return tensor;
}

template <class T>
Tensor Tensor::from_vector(std::span<const T> values, const Shape& shape) {
  require(static_cast<std::int64_t>(values.size()) == shape.numel(), "from_vector got ", values.size(),
          " values for shape ", shape, " of ", shape.numel(), " elements");
  Tensor tensor = empty(shape, dtype_of<T>, Device::cpu());
  if (!values.empty()) std::memcpy(tensor.raw_data(), values.data(), values.size_bytes());
  return tensor;
}

template Tensor Tensor::from_vector<float>(std::span<const float>, const Shape&);
template Tensor Tensor::from_vector<half>(std::span<const half>, const Shape&);
template Tensor Tensor::from_vector<bfloat16>(std::span<const bfloat16>, const Shape&);
template Tensor Tensor::from_vector<std::int32_t>(std::span<const std::int32_t>, const Shape&);
template Tensor Tensor::from_vector<std::int64_t>(std::span<const std::int64_t>, const Shape&);
template Tensor Tensor::from_vector<std::uint8_t>(std::span<const std::uint8_t>, const Shape&);
template Tensor Tensor::from_vector<std::uint16_t>(std::span<const std::uint16_t>, const Shape&);

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device, Storage::Release release) {
  require(data != nullptr || shape.numel() == 0, "from_blob got a null pointer for shape ", shape);
  if (device.is_cuda()) detail::cuda_rt::require_device(device.index());
  const std::size_t bytes = storage_bytes(shape, dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, device, std::move(release)), 0, shape, dtype);
}

Device Tensor::device() const {
  require_defined("device()");
  return storage_->device();
}

void* Tensor::raw_data() const {
  require_defined("raw_data()");
  if (storage_->data() == nullptr) return nullptr;
  return static_cast<std::byte*>(storage_->data()) + offset_bytes_;
}

void Tensor::require_defined(const char* operation) const {
  require(storage_ != nullptr, operation, " called on an undefined tensor");
}

void Tensor::require_numel_one() const {
  require(numel() == 1, "item() needs a tensor of one element, got ", *this);
}

void Tensor::check_element_access(DType requested, bool needs_cpu) const {
  require_defined("element access");
  require(requested == dtype_, "element type ", requested, " requested from ", *this);
  require(!needs_cpu || storage_->device().is_cpu(), "host element access to ", *this,
          "; copy it to the CPU first (to(Device::cpu()))");
}

std::int64_t Tensor::flat_index(std::initializer_list<std::int64_t> index) const {
  require(static_cast<std::int64_t>(index.size()) == rank(), "index of ", index.size(),
          " coordinates for ", *this);
  std::int64_t flat = 0;
  std::int64_t dim = 0;
  for (const std::int64_t coordinate : index) {
    const std::int64_t extent = shape_.extents()[static_cast<std::size_t>(dim)];
    require(coordinate >= 0 && coordinate < extent, "index ", coordinate, " out of range [0, ", extent,
            ") in dimension ", dim, " of ", *this);
    flat = flat * extent + coordinate;
    ++dim;
  }
  return flat;
}

void Tensor::copy_to_host(void* destination) const {
  copy(from_blob(destination, shape_, dtype_, Device::cpu()), *this);
}

Tensor Tensor::view(const Shape& shape) const {
  require_defined("view()");
  require(shape.numel() == numel(), "cannot view ", *this, " as shape ", shape, " (",
          shape.numel(), " elements)");
  return Tensor(storage_, offset_bytes_, shape, dtype_);
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  require_defined("slice()");
  require(rank() >= 1, "slice() needs rank >= 1, got ", *this);
  const std::int64_t rows = shape_.extents()[0];
  require(0 <= begin && begin <= end && end <= rows, "slice [", begin, ", ", end,
          ") out of range for dimension 0 of ", *this);
  std::vector<std::int64_t> extents = shape_.extents();
  extents[0] = end - begin;
  const std::int64_t row_elements = rows == 0 ? 0 : numel() / rows;
  const std::size_t offset = offset_bytes_ + static_cast<std::size_t>(begin * row_elements) * element_size();
  return Tensor(storage_, offset, Shape(std::move(extents)), dtype_);
}

Tensor Tensor::select(std::int64_t i) const {
  require_defined("select()");
  require(rank() >= 1, "select() needs rank >= 1, got ", *this);
  require(0 <= i && i < shape_.extents()[0], "select(", i, ") out of range for ", *this);
  const Tensor row = slice(i, i + 1);
  return row.view(Shape(std::vector<std::int64_t>(shape_.extents().begin() + 1, shape_.extents().end())));
}

Tensor Tensor::as_bytes() const {
  require_defined("as_bytes()");
  return Tensor(storage_, offset_bytes_, Shape{static_cast<std::int64_t>(nbytes())}, DType::u8);
}

Tensor Tensor::to(Device device, StreamRef stream) const {
  require_defined("to()");
  if (device == this->device()) return *this;
  Tensor result = empty(shape_, dtype_, device);
  copy(result, *this, stream);
  return result;
}

Tensor Tensor::clone(StreamRef stream) const {
  require_defined("clone()");
  Tensor result = empty(shape_, dtype_, device());
  copy(result, *this, stream);
  return result;
}

std::string Tensor::description() const {
  if (!defined()) return "Tensor(undefined)";
  return "Tensor(" + std::string(dtype_name(dtype_)) + ", " + shape_.to_string() + ", " +
         storage_->device().to_string() + ")";
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.description(); }

}  // namespace loom
