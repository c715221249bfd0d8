// Gradient clipping by global L2 norm.
#pragma once

#include <span>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/optim/optimizer.hpp"

namespace loom::optim {

// The global L2 norm of all the gradients (after multiplying them by pre_scale, e.g. 1 / loss
// scale), read back to the host. With a communicator, grads are this rank's part of a sharded
// gradient: the squares are summed over the ranks (a collective), so every rank gets the norm of
// the whole gradient.
float global_grad_norm(std::span<const Tensor> grads, comm::Communicator* comm = nullptr, float pre_scale = 1.0f,
                       StreamRef stream = {});

// The L2 norm of the whole gradient an optimizer's space holds, the same bits whether one optimizer
// holds everything (DDP) or each rank its shard (ZeRO, `shards` its communicator: a collective):
// the squares are summed per slice of the space's fixed partition (ranks() slices per unit), the
// partial sums gathered, and added in one fixed order in double. (Clipping multiplies every
// gradient by a factor of this norm; AdamW turns a last-bit difference in it into visible
// differences in the weights, so DDP and ZeRO must agree exactly.)
float space_grad_norm(const Optimizer& optimizer, comm::Communicator* shards = nullptr, StreamRef stream = {});
// The same for a space whose parameters are split over a tensor-parallel group (`tensor`, size
// > 1): each rank holds its blocks of the split parameters (model::Partition::replicated false)
// and all of the replicated ones, so the split parameters' squares are summed over the group and
// the replicated ones counted once. Collective over shards (when sharded) and tensor.
float space_grad_norm(const Optimizer& optimizer, comm::Communicator* shards, comm::Communicator* tensor,
                      StreamRef stream);

// The factor that brings a gradient of norm `norm` down to max_norm (1 when it already is below,
// or when max_norm <= 0 means no clipping). Pass it to the optimizer as grad_scale, so clipping
// costs no extra pass over the gradients.
float clip_factor(float norm, float max_norm);

}  // namespace loom::optim
