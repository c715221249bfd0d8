#include "src/shard/gathered_units.hpp"

#include "loom/core/memory_category.hpp"
#include "loom/core/error.hpp"

namespace loom::shard::detail {

GatheredUnits::GatheredUnits(comm::Communicator& comm, model::ParameterSpace& space)
    : comm_(comm),
      space_(space),
      state_(space.units().size(), State::released),
      was_prefetched_(space.units().size(), false),
      work_(space.units().size()),
      buffer_(space.units().size()) {}

GatheredUnits::~GatheredUnits() { release_all(); }

Tensor GatheredUnits::take_buffer(std::int64_t elements) {
  // The smallest free buffer that fits: a block's buffer serves the next block.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->numel() >= elements && (best == free_.end() || it->numel() < best->numel())) best = it;
  }
  if (best != free_.end()) {
    Tensor buffer = std::move(*best);
    free_.erase(best);
    return buffer;
  }
  // None fits: the free ones are all smaller, and keeping them would grow the pool past the units
  // in use; they go, so the pool never holds more than the units gathered at once.
  for (const Tensor& small : free_) {
    bytes_ -= static_cast<std::int64_t>(small.nbytes());
    --allocated_;
  }
  free_.clear();
  const MemoryCategoryScope memory(MemoryCategory::parameters);  // (a unit's gathered values)
  Tensor buffer = Tensor::empty({elements}, space_.storage(), space_.device());
  ++allocated_;
  bytes_ += static_cast<std::int64_t>(buffer.nbytes());
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  return buffer;
}

void GatheredUnits::issue(std::size_t unit, StreamRef stream) {
  const model::Unit& u = space_.units()[unit];
  Tensor buffer = take_buffer(u.elements);
  const Tensor view = buffer.slice(0, u.elements);
  comm::Work work;
  try {
    work = comm_.all_gather(space_.unit_slice_values(unit, space_.value_rank()), view, stream);
  } catch (...) {
    free_.push_back(std::move(buffer));
    throw;
  }
  space_.bind_unit_values(unit, view);
  buffer_[unit] = std::move(buffer);
  work_[unit] = std::move(work);
  state_[unit] = State::in_flight;
  ++stats_.gathers;
  peak_live_ = std::max(peak_live_, ++live_);
}

void GatheredUnits::prefetch(std::size_t unit, StreamRef stream) {
  if (state_.at(unit) != State::released) return;
  issue(unit, stream);
  was_prefetched_[unit] = true;
  ++stats_.prefetched;
}

void GatheredUnits::require(std::size_t unit, StreamRef stream) {
  if (state_.at(unit) == State::ready) return;
  if (state_[unit] == State::released) {
    issue(unit, stream);
    was_prefetched_[unit] = false;
  }
  if (was_prefetched_[unit] && work_[unit].is_completed()) {
    ++stats_.ready;
  } else {
    ++stats_.waited;
  }
  // The stream waits, not the host (on a GPU; on the CPU this is a wait). A gather that fails
  // later aborts the communicator, and the next host wait on it reports the failure.
  work_[unit].wait_on(stream);
  work_[unit] = comm::Work();
  state_[unit] = State::ready;
}

void GatheredUnits::release(std::size_t unit) {
  if (state_.at(unit) == State::released) return;
  // A gather in flight still writes the buffer; the next gather into it is ordered after it on the
  // communicator, but the host must not hand it to anything else before it is done.
  if (state_[unit] == State::in_flight) work_[unit].wait();
  work_[unit] = comm::Work();
  space_.bind_unit_values(unit, Tensor());
  free_.push_back(std::move(buffer_[unit]));
  buffer_[unit] = Tensor();
  state_[unit] = State::released;
  --live_;
}

void GatheredUnits::release_all() noexcept {
  for (std::size_t u = 0; u < state_.size(); ++u) {
    try {
      release(u);
    } catch (...) {  // a failed gather: its error reached (or will reach) the caller of require()
      work_[u] = comm::Work();
      try {
        space_.bind_unit_values(u, Tensor());
      } catch (...) {
      }
      buffer_[u] = Tensor();  // the failed gather's buffer is not reused
      state_[u] = State::released;
      --live_;
    }
  }
}

}  // namespace loom::shard::detail
