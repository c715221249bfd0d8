#include "loom/data/batch_source.hpp"

#include "loom/core/error.hpp"

namespace loom::data {

void Partition::validate() const {
  require(world >= 1 && rank >= 0 && rank < world, "data partition: rank ", rank, " is outside a world of ", world);
}

std::int64_t BatchSource::consumed_at(std::int64_t position, int world) const { return position * world; }

std::int64_t BatchSource::position_at(std::int64_t consumed, int world) const {
  require(world >= 1, "data position: the job needs at least one rank, got ", world);
  // Global batch g is batch g / N of rank g % N: after G batches every rank is at G / N.
  require(consumed % world == 0, "data position: the checkpoint's job consumed ", consumed,
          " batches, which do not divide over this job's ", world, " ranks; resume with a number of ranks that "
          "divides them (and keep ranks x accumulation x batch, the global batch, the same)");
  return consumed / world;
}

}  // namespace loom::data
