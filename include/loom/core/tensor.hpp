// Tensor: dtype + shape + device over shared storage. Always contiguous (row-major); views and
// slices share storage and never copy. A Tensor is a handle: copying it shares the elements,
// and const applies to the handle, not to the elements (as with std::shared_ptr<T>).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/core/allocator.hpp"
#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"

namespace loom {

// One allocation. Releases it when the last tensor viewing it goes away.
class Storage {
 public:
  using Release = std::function<void(void*)>;
  Storage(void* data, std::size_t bytes, Device device, Release release);
  ~Storage();  // never throws: a failing release is reported on stderr
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  Device device() const noexcept { return device_; }

 private:
  void* data_;
  std::size_t bytes_;
  Device device_;
  Release release_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing; most calls on it throw

  // Uninitialized storage from default_allocator(device).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Uninitialized storage from allocator, usable on stream.
  static Tensor empty(const Shape& shape, DType dtype, std::shared_ptr<Allocator> allocator,
                      StreamRef stream = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, DType dtype, double value, Device device = Device::cpu());
  // A CPU tensor holding a copy of values; values.size() must equal shape.numel().
  template <class T>
  static Tensor from_vector(std::span<const T> values, const Shape& shape);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    return from_vector(std::span<const T>(values), shape);
  }
  // Wraps memory owned elsewhere without copying; release (if any) runs when the last view dies.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                          Storage::Release release = {});

  bool defined() const noexcept { return storage_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  DType dtype() const noexcept { return dtype_; }
  Device device() const;
  std::int64_t rank() const noexcept { return shape_.rank(); }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  std::int64_t size(std::int64_t dim) const { return shape_[dim]; }
  std::size_t element_size() const noexcept { return dtype_size(dtype_); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * element_size(); }

  void* raw_data() const;  // first element, on the tensor's device
  // Typed pointer to the first element (a device pointer for CUDA tensors). Checks T against dtype.
  template <class T>
  T* data() const {
    check_element_access(dtype_of<T>, false);
    return static_cast<T*>(raw_data());
  }
  // The elements as a span; CPU tensors only.
  template <class T>
  std::span<T> span() const {
    check_element_access(dtype_of<T>, true);
    return {static_cast<T*>(raw_data()), static_cast<std::size_t>(numel())};
  }
  // One element by multi-index, bounds-checked; CPU tensors only.
  template <class T>
  T& at(std::initializer_list<std::int64_t> index) const {
    check_element_access(dtype_of<T>, true);
    return static_cast<T*>(raw_data())[flat_index(index)];
  }
  // The only element of a one-element tensor, from any device.
  template <class T>
  T item() const {
    require_numel_one();
    return to_vector<T>().front();
  }
  // A host copy of the elements, from any device.
  template <class T>
  std::vector<T> to_vector() const {
    check_element_access(dtype_of<T>, false);
    std::vector<T> out(static_cast<std::size_t>(numel()));
    copy_to_host(out.data());
    return out;
  }

  // Same elements, another shape with the same numel.
  Tensor view(const Shape& shape) const;
  Tensor flatten() const { return view(Shape{numel()}); }
  // Rows [begin, end) along dimension 0 (rank >= 1).
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  // Row i along dimension 0, with that dimension removed.
  Tensor select(std::int64_t i) const;
  // The same memory as nbytes() u8 elements (for raw I/O, byte-wise transfers and poisoning).
  Tensor as_bytes() const;

  // A copy on device (this tensor itself when already there).
  Tensor to(Device device, StreamRef stream = {}) const;
  Tensor clone(StreamRef stream = {}) const;
  bool shares_storage_with(const Tensor& other) const noexcept {
    return storage_ != nullptr && storage_ == other.storage_;
  }
  // Whether this handle is the only one on its storage (no copy or view of it exists elsewhere).
  bool sole_owner() const noexcept { return storage_ != nullptr && storage_.use_count() == 1; }
  // "Tensor(f32, (2, 3), cpu)"
  std::string description() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, std::size_t offset_bytes, Shape shape, DType dtype);
  void require_defined(const char* operation) const;
  void require_numel_one() const;
  void check_element_access(DType requested, bool needs_cpu) const;
  std::int64_t flat_index(std::initializer_list<std::int64_t> index) const;
  void copy_to_host(void* destination) const;

  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

// Writes description() (also for an undefined tensor). Error messages take tensors through this,
// so the text is only built when a check fails.
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

}  // namespace loom
