#include "loom/model/parameter_space.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <vector>
#include <utility>

#include "loom/core/memory_category.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/model/init.hpp"

namespace loom::model {

namespace {

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

ParameterSpace::ParameterSpace(std::vector<UnitSpec> units, int ranks)
    : ParameterSpace(std::move(units), SpaceLayout{.ranks = ranks}) {}

ParameterSpace::ParameterSpace(std::vector<UnitSpec> units, const SpaceLayout& layout) {
  require(!units.empty(), "parameter space: no units");
  require(layout.ranks >= 1 && layout.rank >= 0 && layout.rank < layout.ranks, "parameter space: rank ", layout.rank,
          " of ", layout.ranks, " is not a rank of the layout");
  std::set<const Parameter*> seen;
  const Parameter* first = nullptr;
  for (UnitSpec& spec : units) {
    require(!spec.parameters.empty(), "parameter space: unit '", spec.name, "' has no parameters");
    Unit unit;
    unit.name = std::move(spec.name);
    for (Parameter* p : spec.parameters) {
      require(p != nullptr, "parameter space: unit '", unit.name, "' lists a null parameter");
      require(seen.insert(p).second, "parameter space: parameter '", p->name(), "' is listed twice");
      if (first == nullptr) first = p;
      require(p->device() == first->device() && p->dtype() == first->dtype(),
              "parameter space: every parameter needs the same device and dtype; '", first->name(), "' is ",
              first->dtype(), " on ", first->device(), " but '", p->name(), "' is ", p->dtype(), " on ", p->device());
      unit.slots.push_back(slots_.size());
      slots_.push_back({p, 0, p->numel(), units_.size()});
    }
    units_.push_back(std::move(unit));
  }
  device_ = first->device();
  storage_ = first->dtype();
  lay_out(layout.ranks);
  const bool described = std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.parameter->has_value(); });
  if (layout.values == ValueMode::sharded && described) {
    // Nothing to copy: only this rank's slices are ever allocated.
    for (const Slot& slot : slots_) slot.parameter->bind(Tensor(), Tensor());
    {
      const MemoryCategoryScope memory(MemoryCategory::parameters);
      shard_values_ = Tensor::zeros({shard_elements()}, storage_, device_);
    }
    value_rank_ = layout.rank;
    mode_ = ValueMode::sharded;
    bound_.assign(units_.size(), Tensor());
    bound_values_.assign(units_.size(), Tensor());
    if (layout.grads) allocate_grads();
    return;
  }
  const Tensor values = [&] {
    const MemoryCategoryScope memory(MemoryCategory::parameters);
    return Tensor::zeros({elements_}, storage_, device_);
  }();
  const Tensor grads = [&] {
    const MemoryCategoryScope memory(MemoryCategory::gradients);
    return layout.grads ? Tensor::zeros({elements_}, DType::f32, device_) : Tensor();
  }();
  rebind(values, grads);
  if (layout.values == ValueMode::sharded) shard_values(layout.rank);
}

void ParameterSpace::lay_out(int ranks) {
  require(ranks >= 1, "parameter space: ranks must be >= 1, got ", ranks);
  std::int64_t begin = 0;
  for (Unit& unit : units_) {
    unit.begin = begin;
    std::int64_t offset = begin;
    for (const std::size_t s : unit.slots) {
      slots_[s].offset = offset;
      offset = round_up(offset + slots_[s].numel, space_alignment_elements);
    }
    unit.elements = round_up(offset - begin, space_alignment_elements * ranks);
    begin += unit.elements;
  }
  ranks_ = ranks;
  elements_ = begin;
  ++layout_version_;
}

void ParameterSpace::rebind(const Tensor& values, const Tensor& grads) {
  // First every copy, from wherever each parameter points now (its own storage, or the old
  // layout), which may fail; then the binds, which cannot (same shapes and dtypes): a failure
  // leaves every parameter where it was.
  std::vector<std::pair<Tensor, Tensor>> views;
  for (const Slot& slot : slots_) {
    const Parameter& p = *slot.parameter;
    const Tensor value = values.slice(slot.offset, slot.offset + slot.numel).view(p.shape());
    if (p.has_value()) copy(value, p.value());
    Tensor grad;
    if (grads.defined()) {
      grad = grads.slice(slot.offset, slot.offset + slot.numel).view(p.shape());
      if (p.has_grad()) copy(grad, p.grad());
    }
    views.emplace_back(value, grad);
  }
  for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].parameter->bind(views[i].first, views[i].second);
  values_ = values;
  grads_ = grads;
  bound_.assign(units_.size(), Tensor());
  bound_values_.assign(units_.size(), Tensor());
}

void ParameterSpace::repartition(int ranks) {
  if (ranks == ranks_) return;
  require(ranks >= 1, "parameter space: ranks must be >= 1, got ", ranks);
  require(mode_ == ValueMode::full, "parameter space: cannot lay out again while the values are sharded (ZeRO-3 holds "
          "them); destroy the ZeRO engine first");
  require(grads_allocated(), "parameter space: cannot lay out again while the gradients are released (ZeRO-2 holds "
          "them); destroy the ZeRO engine first");
  const int old_ranks = ranks_;
  const std::uint64_t old_version = layout_version_;
  lay_out(ranks);
  try {
    const Tensor values = [&] {
      const MemoryCategoryScope memory(MemoryCategory::parameters);
      return Tensor::zeros({elements_}, storage(), device());
    }();
    const Tensor grads = [&] {
      const MemoryCategoryScope memory(MemoryCategory::gradients);
      return Tensor::zeros({elements_}, DType::f32, device());
    }();
    rebind(values, grads);
  } catch (...) {
    lay_out(old_ranks);  // rebind binds nothing unless every copy succeeded: all still point here
    layout_version_ = old_version;
    throw;
  }
}

std::vector<Parameter*> ParameterSpace::parameters() const {
  std::vector<Parameter*> out;
  for (const Slot& slot : slots_) out.push_back(slot.parameter);
  return out;
}

std::int64_t ParameterSpace::parameter_elements() const noexcept {
  std::int64_t total = 0;
  for (const Slot& slot : slots_) total += slot.numel;
  return total;
}

std::int64_t ParameterSpace::elements_at(int ranks) const {
  std::int64_t total = 0;
  for (const std::int64_t elements : unit_elements_at(ranks)) total += elements;
  return total;
}

std::int64_t padded_unit_elements(std::span<const std::int64_t> parameter_elements, int ranks) {
  require(ranks >= 1, "parameter space: ranks must be >= 1, got ", ranks);
  std::int64_t used = 0;
  for (const std::int64_t numel : parameter_elements) used = round_up(used + numel, space_alignment_elements);
  return round_up(used, space_alignment_elements * ranks);
}

std::vector<std::int64_t> ParameterSpace::unit_elements_at(int ranks) const {
  std::vector<std::int64_t> out;
  for (const Unit& unit : units_) {
    std::vector<std::int64_t> numels;
    for (const std::size_t s : unit.slots) numels.push_back(slots_[s].numel);
    out.push_back(padded_unit_elements(numels, ranks));
  }
  return out;
}

Tensor ParameterSpace::unit_values(std::size_t unit) const {
  const Unit& u = units_.at(unit);
  if (mode_ == ValueMode::full) return values_.slice(u.begin, u.begin + u.elements);
  require(bound_values_[unit].defined(), "parameter space: the values of unit '", u.name, "' are sharded and not "
          "gathered now (ZeRO-3 gathers a unit only while the model uses it)");
  return bound_values_[unit];
}

namespace {

// Where slice `rank` of unit `unit` starts in a packed per-rank buffer, and its size.
std::pair<std::int64_t, std::int64_t> packed_slice(const std::vector<Unit>& units, std::size_t unit, int ranks) {
  std::int64_t local = 0;
  for (std::size_t u = 0; u < unit; ++u) local += units[u].elements / ranks;
  return {local, units[unit].elements / ranks};
}

}  // namespace

Tensor ParameterSpace::stored_values(std::int64_t begin, std::int64_t end) const {
  require(begin >= 0 && begin <= end && end <= elements_, "parameter space: elements [", begin, ", ", end,
          ") are outside [0, ", elements_, ")");
  if (mode_ == ValueMode::full) return values_.slice(begin, end);
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto [local, size] = packed_slice(units_, u, ranks_);
    const std::int64_t first = units_[u].begin + value_rank_ * size;
    if (begin >= first && end <= first + size) return shard_values_.slice(local + begin - first, local + end - first);
  }
  fail(ErrorCategory::invalid_argument, "parameter space: elements [", begin, ", ", end, ") are not inside rank ",
       value_rank_, "'s slices, the only values a sharded space stores");
}

Tensor ParameterSpace::unit_slice_values(std::size_t unit, int rank) const {
  const Unit& u = units_.at(unit);
  const std::int64_t size = u.elements / ranks_;
  return stored_values(u.begin + rank * size, u.begin + (rank + 1) * size);
}

void ParameterSpace::shard_values(int rank, Tensor into) {
  require(mode_ == ValueMode::full, "parameter space: the values are sharded already");
  require(rank >= 0 && rank < ranks_, "parameter space: rank ", rank, " is outside [0, ", ranks_, ")");
  if (into.defined()) {
    require(into.numel() == shard_elements() && into.dtype() == storage_ && into.device() == device_,
            "parameter space: a shard needs ", shard_elements(), " ", storage_, " elements on ", device_, ", got ", into);
  }
  const MemoryCategoryScope memory(MemoryCategory::parameters);
  const Tensor shard = into.defined() ? into : Tensor::empty({shard_elements()}, storage_, device_);
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto [local, size] = packed_slice(units_, u, ranks_);
    const std::int64_t first = units_[u].begin + rank * size;
    copy(shard.slice(local, local + size), values_.slice(first, first + size));
  }
  for (const Slot& slot : slots_) slot.parameter->bind(Tensor(), slot.parameter->grad());
  shard_values_ = shard;
  values_ = Tensor();
  value_rank_ = rank;
  mode_ = ValueMode::sharded;
  bound_values_.assign(units_.size(), Tensor());
}

void ParameterSpace::unshard_values(const Tensor& full) {
  require(mode_ == ValueMode::sharded, "parameter space: the values are not sharded");
  require(full.defined() && full.numel() == elements_ && full.dtype() == storage_ && full.device() == device_,
          "parameter space: the full values must be ", elements_, " ", storage_, " elements on ", device_, ", got ", full);
  for (const Slot& slot : slots_) {
    Parameter& p = *slot.parameter;
    p.bind(full.slice(slot.offset, slot.offset + slot.numel).view(p.shape()), p.grad());
  }
  values_ = full;
  shard_values_ = Tensor();
  value_rank_ = 0;
  mode_ = ValueMode::full;
  bound_values_.assign(units_.size(), Tensor());
}

void ParameterSpace::bind_unit_values(std::size_t unit, const Tensor& buffer) {
  require(mode_ == ValueMode::sharded, "parameter space: bind_unit_values() needs sharded values (shard_values())");
  const Unit& u = units_.at(unit);
  if (buffer.defined()) {
    require(buffer.dtype() == storage_ && buffer.numel() == u.elements && buffer.device() == device_,
            "parameter space: unit '", u.name, "' needs a value buffer of ", u.elements, " ", storage_,
            " elements on ", device_, ", got ", buffer);
  }
  for (const std::size_t s : u.slots) {
    const Slot& slot = slots_[s];
    Parameter& p = *slot.parameter;
    const std::int64_t at = slot.offset - u.begin;
    p.bind(buffer.defined() ? buffer.slice(at, at + slot.numel).view(p.shape()) : Tensor(), p.grad());
  }
  bound_values_[unit] = buffer;
}

Tensor ParameterSpace::unit_grads(std::size_t unit) const {
  require(grads_allocated(), "parameter space: the flat gradient buffer is released (ZeRO-2)");
  const Unit& u = units_.at(unit);
  return grads_.slice(u.begin, u.begin + u.elements);
}

void ParameterSpace::release_grads() {
  for (const Slot& slot : slots_) slot.parameter->bind(slot.parameter->value(), Tensor());
  grads_ = Tensor();
  bound_.assign(units_.size(), Tensor());
}

void ParameterSpace::allocate_grads() {
  if (grads_allocated()) return;
  const MemoryCategoryScope memory(MemoryCategory::gradients);
  const Tensor grads = Tensor::zeros({elements_}, DType::f32, device());
  for (const Slot& slot : slots_) {
    Parameter& p = *slot.parameter;
    p.bind(p.value(), grads.slice(slot.offset, slot.offset + slot.numel).view(p.shape()));
  }
  grads_ = grads;
  bound_.assign(units_.size(), Tensor());
}

void ParameterSpace::bind_unit_grads(std::size_t unit, const Tensor& buffer) {
  require(!grads_allocated(), "parameter space: bind_unit_grads() needs released gradients (release_grads())");
  const Unit& u = units_.at(unit);
  if (buffer.defined()) {
    require(buffer.dtype() == DType::f32 && buffer.numel() == u.elements && buffer.device() == device(),
            "parameter space: unit '", u.name, "' needs a gradient buffer of ", u.elements, " f32 elements on ",
            device(), ", got ", buffer);
  }
  for (const std::size_t s : u.slots) {
    const Slot& slot = slots_[s];
    Parameter& p = *slot.parameter;
    const std::int64_t at = slot.offset - u.begin;
    p.bind(p.value(), buffer.defined() ? buffer.slice(at, at + slot.numel).view(p.shape()) : Tensor());
  }
  bound_[unit] = buffer;
}

void ParameterSpace::zero_grads(StreamRef stream) {
  if (grads_allocated()) {
    fill(grads_, 0.0, stream);
    return;
  }
  for (const Slot& slot : slots_) {
    if (slot.parameter->has_grad()) fill(slot.parameter->grad(), 0.0, stream);
  }
}

namespace {

// The normal draws of a parameter's local elements [first, first + out.numel()), indexed by their
// element of the global tensor its partition places it in: a tensor-parallel rank's boxes hold the
// values one process makes for those elements of the whole tensor. Each box's elements are walked
// in runs along the innermost dimension, each contiguous in the global tensor too.
void fill_normal_in_box(const Tensor& out, std::uint64_t seed, const Parameter& parameter, std::int64_t first,
                        float std) {
  const std::uint64_t stream = parameter_stream(parameter.name());
  const Partition& partition = parameter.partition();
  const Shape& local = parameter.shape();
  if (partition.global == local || local.rank() == 0) {  // whole: offsets are zero, local index = global index
    fill_normal(out, seed, stream, first, std);
    return;
  }
  const std::int64_t rank = local.rank(), end = first + out.numel();
  for (const Box& box : boxes(partition, local)) {
    const Shape& extent = box.extent;
    const std::int64_t inner = extent[rank - 1];
    for (std::int64_t k = std::max(first, box.first), stop = std::min(end, box.first + extent.numel()); k < stop;) {
      // The coordinates of element k - box.first of the box, and its index in the global tensor.
      std::int64_t rest = k - box.first, global = 0, stride = 1;
      std::vector<std::int64_t> coords(static_cast<std::size_t>(rank));
      for (std::int64_t d = rank - 1; d >= 0; --d) {
        coords[static_cast<std::size_t>(d)] = rest % extent[d];
        rest /= extent[d];
      }
      for (std::int64_t d = rank - 1; d >= 0; --d) {
        global += (coords[static_cast<std::size_t>(d)] + box.offset[static_cast<std::size_t>(d)]) * stride;
        stride *= partition.global[d];
      }
      const std::int64_t run = std::min(stop - k, inner - coords.back());
      fill_normal(out.slice(k - first, k - first + run), seed, stream, global, std);
      k += run;
    }
  }
}

}  // namespace

std::pair<std::int64_t, std::int64_t> ParameterSpace::stored_range(const Slot& slot) const {
  std::int64_t begin = slot.offset, end = slot.offset + slot.numel;
  if (mode_ == ValueMode::sharded) {
    const Unit& unit = units_[slot.unit];
    const std::int64_t size = unit.elements / ranks_, first = unit.begin + value_rank_ * size;
    begin = std::max(begin, first);
    end = std::min(end, first + size);
  }
  return {begin, end};
}

void ParameterSpace::initialize(std::uint64_t seed) {
  value_origin_ = loom::detail::concat("initialised from seed ", seed);
  for (const Slot& slot : slots_) {
    const Init& init = slot.parameter->init();
    if (init.kind == Init::Kind::keep) continue;
    const auto [begin, end] = stored_range(slot);
    if (begin >= end) continue;
    const Tensor host = Tensor::empty({end - begin}, DType::f32);
    if (init.kind == Init::Kind::normal) {
      fill_normal_in_box(host, seed, *slot.parameter, begin - slot.offset, init.std);
    } else {
      fill(host, init.kind == Init::Kind::ones ? 1.0 : 0.0);
    }
    const Tensor stored = stored_values(begin, end);
    if (storage_ == DType::f32) {
      copy(stored, host);
    } else {
      const Tensor narrow = Tensor::empty(host.shape(), storage_);
      kernels::cast(host, narrow);
      copy(stored, narrow);
    }
  }
}

namespace {

// Copies box `box` of `whole` (a host tensor of the partition's global shape) into `out`, the
// parameter's local elements from box.first on, a run along the innermost dimension at a time.
void copy_box(const Tensor& whole, const Box& box, const Tensor& out) {
  const Shape& global = whole.shape();
  const std::int64_t rank = global.rank();
  const std::int64_t inner = box.extent[rank - 1];
  const std::int64_t runs = box.extent.numel() / std::max<std::int64_t>(inner, 1);
  const auto element = static_cast<std::int64_t>(dtype_size(whole.dtype()));
  const std::span<const std::uint8_t> from = whole.as_bytes().span<std::uint8_t>();
  const std::span<std::uint8_t> to = out.as_bytes().span<std::uint8_t>();
  for (std::int64_t r = 0; r < runs && inner > 0; ++r) {
    // Run r starts at coordinates (r unravelled over the box's outer extents, the box's column).
    std::int64_t rest = r, at = box.offset[static_cast<std::size_t>(rank - 1)], stride = global[rank - 1];
    for (std::int64_t d = rank - 2; d >= 0; --d) {
      at += (rest % box.extent[d] + box.offset[static_cast<std::size_t>(d)]) * stride;
      rest /= box.extent[d];
      stride *= global[d];
    }
    std::copy_n(from.begin() + at * element, inner * element, to.begin() + (box.first + r * inner) * element);
  }
}

}  // namespace

void ParameterSpace::assign(std::size_t slot_index, const Tensor& whole) {
  require(slot_index < slots_.size(), "parameter space: slot ", slot_index, " is outside [0, ", slots_.size(), ")");
  const Slot& slot = slots_[slot_index];
  const Parameter& p = *slot.parameter;
  const Partition& partition = p.partition();
  require(whole.defined() && whole.shape() == partition.global, "parameter '", p.name(), "' is ", partition.global,
          " but the tensor given for it is ", whole);
  require(whole.dtype() == DType::f32 || whole.dtype() == DType::f16 || whole.dtype() == DType::bf16, "parameter '",
          p.name(), "': a ", whole.dtype(), " tensor cannot be its value (f32, f16 or bf16)");
  const auto [begin, end] = stored_range(slot);
  if (begin >= end) return;
  const Tensor host = whole.device().is_cpu() ? whole : whole.to(Device::cpu());
  Tensor local = host;
  if (p.shape() != partition.global) {  // this rank's blocks of a split tensor
    local = Tensor::empty(p.shape(), host.dtype());
    for (const Box& box : boxes(partition, p.shape())) copy_box(host, box, local);
  }
  Tensor part = local.flatten().slice(begin - slot.offset, end - slot.offset);
  if (part.dtype() != storage_) {
    const Tensor narrow = Tensor::empty(part.shape(), storage_);
    kernels::cast(part, narrow);
    part = narrow;
  }
  copy(stored_values(begin, end), part);
}

std::vector<ShardRange> ParameterSpace::shard(int rank) const {
  require(rank >= 0 && rank < ranks_, "parameter space: rank ", rank, " is outside [0, ", ranks_, ")");
  std::vector<ShardRange> out;
  std::int64_t local = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const std::int64_t size = units_[u].elements / ranks_;
    const std::int64_t begin = units_[u].begin + rank * size;
    out.push_back({u, begin, begin + size, local});
    local += size;
  }
  return out;
}

std::vector<ShardRange> ParameterSpace::whole() const {
  std::vector<ShardRange> out;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    out.push_back({u, units_[u].begin, units_[u].begin + units_[u].elements, units_[u].begin});
  }
  return out;
}

void ParameterSpace::claim(const std::string& who) {
  require(claimed_by_.empty(), "parameter space: ", who, " cannot take the model's values: they are sharded already "
          "and ", claimed_by_, " holds them (one engine gathers them at a time)");
  claimed_by_ = who;
}

std::string ParameterSpace::describe() const {
  std::string text = loom::detail::concat(units_.size(), " units, ", slots_.size(), " parameters, ", elements_,
                                          " elements at ", ranks_, " rank(s), ", storage(), ", values ",
                                          mode_ == ValueMode::full ? "full" : "sharded");
  for (const Unit& unit : units_) {
    text += loom::detail::concat("; ", unit.name, ":");
    for (const std::size_t s : unit.slots) {
      text += loom::detail::concat(" ", slots_[s].parameter->name(), slots_[s].parameter->shape());
    }
  }
  return text;
}

}  // namespace loom::model
