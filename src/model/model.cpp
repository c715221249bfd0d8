#include "loom/model/model.hpp"

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::model {

void Model::forward_into(const Tensor& inputs, const Tensor& targets, const Tensor& loss_sum, StreamRef stream) {
  require(loss_sum.defined() && loss_sum.dtype() == DType::f32 && loss_sum.numel() == 1,
          "Model::forward_into: loss_sum must be a [1] f32 tensor, got ", loss_sum);
  const float loss = forward(inputs, targets, stream);
  synchronize(stream);
  const Tensor host = loss_sum.to(Device::cpu());
  host.data<float>()[0] += loss;
  copy(loss_sum, host, stream);
  synchronize(stream);
}

Model::HooksId Model::add_unit_hooks(UnitHooks hooks) {
  hooks_.emplace_back(next_hooks_id_, std::move(hooks));
  return next_hooks_id_++;
}

void Model::remove_unit_hooks(HooksId id) noexcept {
  std::erase_if(hooks_, [id](const auto& entry) { return entry.first == id; });
}

// Before a use in subscription order, after it in reverse: a subscriber added later sees a unit
// inside what an earlier one set up (as nested scopes would).
void Model::before_forward(std::size_t unit, StreamRef stream) const {
  for (const auto& [id, h] : hooks_) {
    if (h.before_forward) h.before_forward(unit, stream);
  }
}

void Model::after_forward(std::size_t unit, StreamRef stream) const {
  for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) {
    if (it->second.after_forward) it->second.after_forward(unit, stream);
  }
}

void Model::before_backward(std::size_t unit, StreamRef stream) const {
  for (const auto& [id, h] : hooks_) {
    if (h.before_backward) h.before_backward(unit, stream);
  }
}

void Model::after_backward(std::size_t unit, StreamRef stream) const {
  for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) {
    if (it->second.after_backward) it->second.after_backward(unit, stream);
  }
}

}  // namespace loom::model
