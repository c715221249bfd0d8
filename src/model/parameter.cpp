#include "loom/model/parameter.hpp"

#include <utility>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::model {

namespace {

Partition whole(const Shape& shape) {
  return {shape, std::vector<std::int64_t>(static_cast<std::size_t>(shape.rank()), 0), true};
}

}  // namespace

Parameter::Parameter(std::string name, Shape shape, DType dtype, Device device, bool weight_decay)
    : name_(std::move(name)),
      shape_(std::move(shape)),
      dtype_(dtype),
      device_(device),
      weight_decay_(weight_decay),
      partition_(whole(shape_)) {}

Parameter::Parameter(std::string name, Tensor value, DType grad_dtype, bool weight_decay)
    : name_(std::move(name)), weight_decay_(weight_decay) {
  require(value.defined(), "parameter '", name_, "' has no value");
  require(grad_dtype == DType::f32, "parameter '", name_, "': gradients are f32 (the layers accumulate in f32), got ",
          grad_dtype);
  shape_ = value.shape();
  dtype_ = value.dtype();
  device_ = value.device();
  partition_ = whole(shape_);
  grad_ = Tensor::zeros(shape_, grad_dtype, device_);
  value_ = std::move(value);
}

void Parameter::set_partition(Partition partition) {
  const std::int64_t rank = shape_.rank();
  require(partition.global.rank() == rank && static_cast<std::int64_t>(partition.offset.size()) == rank, "parameter '",
          name_, "': a partition needs a global shape and an offset of rank ", rank, ", got ", partition.global,
          " and ", partition.offset.size(), " offset(s)");
  const std::int64_t stack = partition.stack;
  require(stack >= 1 && (stack == 1 || (rank >= 1 && shape_[0] % stack == 0 && partition.global[0] % stack == 0)),
          "parameter '", name_, "': a stack of ", stack, " parts needs local ", shape_, " and global ", partition.global,
          " shapes whose first dimension divides by it");
  for (std::int64_t d = 0; d < rank; ++d) {
    const std::int64_t at = partition.offset[static_cast<std::size_t>(d)];
    const std::int64_t local = d == 0 ? shape_[0] / stack : shape_[d], global = d == 0 ? partition.global[0] / stack
                                                                                       : partition.global[d];
    require(at >= 0 && at + local <= global, "parameter '", name_, "': its box ", shape_, " at offset ", at,
            " in dimension ", d, " does not fit the global shape ", partition.global,
            stack > 1 ? loom::detail::concat(" (", stack, " stacked parts)") : std::string());
  }
  partition_ = std::move(partition);
}

std::vector<Box> boxes(const Partition& partition, const Shape& local) {
  if (partition.stack == 1 || partition.global == local) return {{0, partition.offset, local}};
  std::vector<std::int64_t> rows = local.extents();
  rows[0] /= partition.stack;
  const Shape extent(std::move(rows));
  std::vector<Box> out;
  for (std::int64_t k = 0; k < partition.stack; ++k) {
    Box box{k * extent.numel(), partition.offset, extent};
    box.offset[0] += k * (partition.global[0] / partition.stack);
    out.push_back(std::move(box));
  }
  return out;
}

void Parameter::bind(Tensor value, Tensor grad) {
  if (value.defined()) {
    require(value.shape() == shape_ && value.dtype() == dtype_, "parameter '", name_, "': a value must be ", dtype_,
            " ", shape_, ", got ", value);
  }
  if (grad.defined()) {
    require(grad.shape() == shape_ && grad.dtype() == DType::f32 && grad.device() == device_, "parameter '", name_,
            "': a gradient must be f32 ", shape_, " on ", device_, ", got ", grad);
  }
  value_ = std::move(value);
  grad_ = std::move(grad);
}

void Parameter::zero_grad() {
  if (grad_.defined()) fill(grad_, 0.0);
}

Parameter::HookId Parameter::add_grad_ready_hook(GradReadyHook hook) {
  require(static_cast<bool>(hook), "parameter '", name_, "': empty gradient-ready hook");
  hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Parameter::remove_grad_ready_hook(HookId id) noexcept {
  std::erase_if(hooks_, [id](const auto& entry) { return entry.first == id; });
}

void Parameter::mark_grad_ready(StreamRef stream) {
  for (const auto& [id, hook] : hooks_) hook(*this, stream);
}

}  // namespace loom::model
