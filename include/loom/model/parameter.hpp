// A trainable tensor, described independently of its storage: its name (the checkpoint key), its
// shape, dtype and device, whether weight decay applies, the part of a larger tensor it covers
// (its partition), and "gradient ready" hooks. Storage is bound separately: once a ParameterSpace
// takes the parameter in, its value and gradient are views into the space's buffers, and they may
// be unbound for a while (under ZeRO-2 the gradient exists only while its unit's backward runs;
// under ZeRO-3 the value exists only while its unit's forward or backward runs). Layers accumulate
// into grad() during backward and call mark_grad_ready() the moment a parameter's gradient is
// final for this backward pass, in backward order; a gradient all-reduce engine subscribes to start
// communicating while the rest of backward still runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/model/init.hpp"

namespace loom::model {

// Which box of a larger (global) tensor a parameter holds: offset[d] .. offset[d] + shape[d] in
// every dimension d of `global`, and whether every rank of the tensor-parallel group holds the
// same box (a replicated layer norm) or its own (a column- or row-split weight). A parameter that
// is not split covers the whole of itself: global == shape, offsets 0, replicated.
//
// A fused weight of `stack` tensors stacked along dimension 0 (attention's QKV: q, k and v, so 3)
// is split in each of them: the parameter is then `stack` boxes, box k holding rows
// [offset[0], offset[0] + shape[0] / stack) of part k, that is global rows k global[0] / stack +
// offset[0] onwards (boxes() lists them).
struct Partition {
  Shape global;
  std::vector<std::int64_t> offset;
  bool replicated = true;
  std::int64_t stack = 1;
};

// One box of a partition: local elements [first, first + extent.numel()) of the parameter (its
// row-major order) are the box `extent` at `offset` in the global tensor.
struct Box {
  std::int64_t first = 0;
  std::vector<std::int64_t> offset;
  Shape extent;
};
// The boxes of a parameter of shape `local` under `partition`, in local order: one unless it
// stacks several split parts (and is not whole).
std::vector<Box> boxes(const Partition& partition, const Shape& local);

class Parameter {
 public:
  using GradReadyHook = std::function<void(Parameter&, StreamRef)>;
  using HookId = std::uint64_t;

  // A description without storage: a ParameterSpace allocates it (zeros) when it takes the
  // parameter in.
  Parameter(std::string name, Shape shape, DType dtype, Device device, bool weight_decay);
  // value: the parameter as the model stores it; the gradient is allocated zeroed, in grad_dtype
  // (f32), on the value's device.
  Parameter(std::string name, Tensor value, DType grad_dtype, bool weight_decay);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const std::string& name() const noexcept { return name_; }
  const Shape& shape() const noexcept { return shape_; }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  bool weight_decay() const noexcept { return weight_decay_; }
  const Partition& partition() const noexcept { return partition_; }
  // How ParameterSpace::initialize sets it (default: keep the values it was built with).
  const Init& init() const noexcept { return init_; }
  void set_init(Init init) { init_ = init; }
  // Declares the box of a global tensor this parameter holds (tensor parallelism); checked
  // against the shape.
  void set_partition(Partition partition);

  // The storage bound now (undefined while there is none: ZeRO-3 outside the unit's use).
  const Tensor& value() const noexcept { return value_; }
  const Tensor& grad() const noexcept { return grad_; }
  bool has_value() const noexcept { return value_.defined(); }
  bool has_grad() const noexcept { return grad_.defined(); }
  // Rebinds the value (this shape and dtype, or undefined: no value storage now; its contents are
  // the caller's business) and the gradient (f32 of this shape, or undefined).
  void bind(Tensor value, Tensor grad);
  void zero_grad();  // nothing to do without gradient storage

  // Returns an id for remove_grad_ready_hook (a reducer detaches itself when destroyed).
  HookId add_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(HookId id) noexcept;
  // Runs the hooks, in the order they were added, with the stream the gradient was computed on.
  // Called by layers during backward.
  void mark_grad_ready(StreamRef stream = {});

 private:
  std::string name_;
  Shape shape_;
  DType dtype_;
  Device device_;
  bool weight_decay_;
  Partition partition_;
  Init init_;
  Tensor value_;
  Tensor grad_;
  std::vector<std::pair<HookId, GradReadyHook>> hooks_;
  HookId next_hook_id_ = 1;
};

}  // namespace loom::model
