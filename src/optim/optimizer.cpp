#include "loom/optim/optimizer.hpp"

#include <algorithm>
#include <utility>

#include "loom/core/memory_category.hpp"
#include "loom/core/error.hpp"
#include "loom/kernels/cast.hpp"

namespace loom::optim {

int moments_per_element(OptimizerKind kind) noexcept {
  switch (kind) {
    case OptimizerKind::adamw: return 2;
    case OptimizerKind::sgd_momentum: return 1;
    case OptimizerKind::sgd: return 0;
  }
  return 0;
}

Optimizer::Optimizer(model::ParameterSpace& space, std::vector<model::ShardRange> ranges)
    : space_(space), ranges_(ranges.empty() ? space.whole() : std::move(ranges)), layout_version_(space.layout_version()) {
  for (const model::ShardRange& range : ranges_) {
    require(range.unit < space_.units().size() && range.begin >= space_.units()[range.unit].begin &&
                range.end <= space_.units()[range.unit].begin + space_.units()[range.unit].elements &&
                range.begin <= range.end,
            "optimizer: range [", range.begin, ", ", range.end, ") is not inside unit ", range.unit, " of the space");
    local_elements_ = std::max(local_elements_, range.local + range.elements());
    for (const std::size_t s : space_.units()[range.unit].slots) {
      const model::Slot& slot = space_.slots()[s];
      const std::int64_t begin = std::max(range.begin, slot.offset);
      const std::int64_t end = std::min(range.end, slot.offset + slot.numel);
      if (begin >= end) continue;
      segments_.push_back({s, begin, end, range.local + (begin - range.begin), slot.parameter->weight_decay()});
    }
  }
}

void Optimizer::add_masters() {
  if (space_.storage() == DType::f32) return;
  master_ = add_state("master");
  for (const Segment& s : segments_) kernels::cast(space_.stored_values(s.begin, s.end), local(master_, s));
}

Tensor Optimizer::add_state(std::string kind) {
  kinds_.push_back(std::move(kind));
  const MemoryCategoryScope memory(MemoryCategory::optimizer);
  states_.push_back(Tensor::zeros({local_elements_}, DType::f32, space_.device()));
  return states_.back();
}

const Tensor& Optimizer::state(const std::string& kind) const {
  const auto it = std::find(kinds_.begin(), kinds_.end(), kind);
  require(it != kinds_.end(), name(), ": no state '", kind, "'");
  return states_[static_cast<std::size_t>(it - kinds_.begin())];
}

std::int64_t Optimizer::state_bytes() const noexcept {
  std::int64_t bytes = 0;
  for (const Tensor& t : states_) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes;
}

void Optimizer::read_gradients_from(Tensor packed) {
  if (packed.defined()) {
    require(packed.dtype() == DType::f32 && packed.numel() == local_elements_ && packed.device() == space_.device(),
            name(), ": packed gradients must be ", local_elements_, " f32 elements on ", space_.device(), ", got ", packed);
  }
  packed_grads_ = std::move(packed);
}

std::vector<Tensor> Optimizer::gradients() const {
  std::vector<Tensor> out;
  for (const model::ShardRange& range : ranges_) {
    out.push_back(packed_grads_.defined() ? packed_grads_.slice(range.local, range.local + range.elements())
                                          : space_.grads().slice(range.begin, range.end));
  }
  return out;
}

Tensor Optimizer::local(const Tensor& state, const Segment& s) { return state.slice(s.local, s.local + (s.end - s.begin)); }

Tensor Optimizer::updated(const Segment& s) const {
  return master_.defined() ? local(master_, s) : space_.stored_values(s.begin, s.end);
}

Tensor Optimizer::grad(const Segment& s) const {
  if (packed_grads_.defined()) return local(packed_grads_, s);
  require(space_.grads_allocated(), name(), ": the space's gradients are released and no packed gradients were given");
  return space_.grads().slice(s.begin, s.end);
}

Tensor Optimizer::low_precision_copy(const Segment& s) const {
  return master_.defined() ? space_.stored_values(s.begin, s.end) : Tensor();
}

std::vector<StateTensor> Optimizer::state_tensors() const {
  require(!sharded(), name(), ": state_tensors() needs the whole state; this optimizer holds a shard (use "
          "optim::gather_state)");
  std::vector<StateTensor> out;
  for (std::size_t k = 0; k < kinds_.size(); ++k) {
    for (const model::Slot& slot : space_.slots()) {
      const Tensor view = states_[k].slice(slot.offset, slot.offset + slot.numel).view(slot.parameter->shape());
      out.push_back({slot.parameter->name() + "." + kinds_[k], view});
    }
  }
  return out;
}

Tensor Optimizer::master(std::size_t slot) const {
  require(!sharded(), name(), ": master() needs an unsharded optimizer");
  if (!master_.defined()) return Tensor();
  const model::Slot& s = space_.slots().at(slot);
  return master_.slice(s.offset, s.offset + s.numel).view(s.parameter->shape());
}

void Optimizer::require_current_layout() const {
  require(space_.layout_version() == layout_version_, name(), ": the parameter space was laid out again (for another "
          "number of ranks) after this optimizer was built; build the optimizer after the gradient reducer or ZeRO engine");
}

void Optimizer::set_steps_taken(std::int64_t steps) {
  require(steps >= 0, name(), ": step count must be >= 0, got ", steps);
  steps_ = steps;
}

}  // namespace loom::optim
