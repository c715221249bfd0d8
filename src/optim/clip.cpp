#include "loom/optim/clip.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/core/caching_allocator.hpp"
#include "loom/core/error.hpp"

#include "loom/kernels/grad_utils.hpp"

namespace loom::optim {

float global_grad_norm(std::span<const Tensor> grads, comm::Communicator* comm, float pre_scale, StreamRef stream) {
  if (comm == nullptr) {
    if (grads.empty()) return 0.0f;
    const Tensor out = scratch_zeros({1}, DType::f32, grads.front().device(), stream);
    kernels::global_l2_norm(grads, out, stream);
    synchronize(stream);
    return out.item<float>() * std::fabs(pre_scale);
  }
  const Tensor squares = scratch_zeros({1}, DType::f32, comm->device(), stream);
  if (!grads.empty()) kernels::sum_of_squares(grads, squares, stream);
  comm->all_reduce(squares, squares, comm::ReduceOp::sum, stream).wait();
  synchronize(stream);
  return std::sqrt(squares.to(Device::cpu()).item<float>()) * std::fabs(pre_scale);
}

float space_grad_norm(const Optimizer& optimizer, comm::Communicator* shards, StreamRef stream) {
  const model::ParameterSpace& space = optimizer.space();
  const int ranks = space.ranks();
  require(!optimizer.sharded() || (shards != nullptr && shards->size() == ranks), optimizer.name(), ": the norm of "
          "a gradient sharded over ", ranks, " ranks needs their communicator");
  const auto units = static_cast<std::int64_t>(space.units().size());
  const Tensor partials = scratch_zeros({units * ranks}, DType::f32, space.device(), stream);
  const std::vector<Tensor> grads = optimizer.gradients();
  const int first_slice = optimizer.sharded() ? shards->rank() : 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const model::ShardRange& range = optimizer.ranges()[i];
    const std::int64_t slice = space.units()[range.unit].elements / ranks;
    for (std::int64_t k = 0; k * slice < grads[i].numel(); ++k) {
      const std::int64_t at = static_cast<std::int64_t>(range.unit) * ranks + first_slice + k;
      const Tensor part = grads[i].slice(k * slice, (k + 1) * slice);
      kernels::sum_of_squares(std::span<const Tensor>(&part, 1), partials.slice(at, at + 1), stream);
    }
  }
  if (optimizer.sharded()) {  // each slot is written by one rank and zero elsewhere: the sum is exact
    shards->all_reduce(partials, partials, comm::ReduceOp::sum, stream).wait();
  }
  synchronize(stream);
  double sum = 0;
  for (const float p : partials.to(Device::cpu()).to_vector<float>()) sum += p;
  return static_cast<float>(std::sqrt(sum));
}

float clip_factor(float norm, float max_norm) {
  if (max_norm <= 0.0f || !std::isfinite(norm) || norm <= max_norm) return 1.0f;
  return max_norm / (norm + 1e-6f);
}

float space_grad_norm(const Optimizer& optimizer, comm::Communicator* shards, comm::Communicator* tensor,
                      StreamRef stream) {
  if (tensor == nullptr || tensor->size() == 1) return space_grad_norm(optimizer, shards, stream);
  const model::ParameterSpace& space = optimizer.space();
  const int ranks = space.ranks();
  require(!optimizer.sharded() || (shards != nullptr && shards->size() == ranks), optimizer.name(), ": the norm of "
          "a gradient sharded over ", ranks, " ranks needs their communicator");
  // Squares per (slot, slice of its unit): each written by one data rank, zero elsewhere.
  const auto slots = static_cast<std::int64_t>(space.slots().size());
  const Tensor partials = scratch_zeros({slots * ranks}, DType::f32, space.device(), stream);
  const std::vector<Tensor> grads = optimizer.gradients();
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const model::ShardRange& range = optimizer.ranges()[i];
    const model::Unit& unit = space.units()[range.unit];
    const std::int64_t slice = unit.elements / ranks;
    for (std::int64_t s = 0; s < slots; ++s) {
      const model::Slot& slot = space.slots()[static_cast<std::size_t>(s)];
      if (slot.unit != range.unit) continue;
      // The slot's elements in this range, cut at the slice boundaries.
      for (std::int64_t at = std::max(slot.offset, range.begin), end = std::min(slot.offset + slot.numel, range.end);
           at < end;) {
        const std::int64_t k = (at - unit.begin) / slice, stop = std::min(end, unit.begin + (k + 1) * slice);
        const Tensor part = grads[i].slice(at - range.begin, stop - range.begin);
        const std::int64_t index = s * ranks + k;
        kernels::sum_of_squares(std::span<const Tensor>(&part, 1), partials.slice(index, index + 1), stream);
        at = stop;
      }
    }
  }
  if (optimizer.sharded()) shards->all_reduce(partials, partials, comm::ReduceOp::sum, stream).wait();
  synchronize(stream);
  // Replicated slots are the same on every rank of the group: each rank contributes 1/N of theirs.
  const std::vector<float> host = partials.to(Device::cpu()).to_vector<float>();
  double sum = 0;
  for (std::int64_t s = 0; s < slots; ++s) {
    const double weight = space.slots()[static_cast<std::size_t>(s)].parameter->partition().replicated
                              ? 1.0 / tensor->size()
                              : 1.0;
    for (int k = 0; k < ranks; ++k) sum += weight * host[static_cast<std::size_t>(s * ranks + k)];
  }
  const Tensor total = Tensor::from_vector(std::vector<float>{static_cast<float>(sum)}, {1}).to(tensor->device());
  tensor->all_reduce(total, total, comm::ReduceOp::sum, stream).wait();
  synchronize(stream);
  return static_cast<float>(std::sqrt(total.to(Device::cpu()).item<float>()));
}

}  // namespace loom::optim
