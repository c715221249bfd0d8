#include "loom/optim/state_io.hpp"

#include <algorithm>
#include <exception>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::optim {

namespace {

std::string state_name(const model::Slot& slot, const std::string& kind) { return slot.parameter->name() + "." + kind; }

}  // namespace

std::vector<StateTensor> gather_state(const Optimizer& optimizer, comm::Communicator* comm, StreamRef stream) {
  if (!optimizer.sharded()) return optimizer.state_tensors();
  const model::ParameterSpace& space = optimizer.space();
  require(comm != nullptr && comm->size() == space.ranks(), optimizer.name(), ": gathering a state sharded over ",
          space.ranks(), " ranks needs their communicator, got ", comm != nullptr ? comm->size() : 0, " rank(s)");
  const bool root = comm->rank() == 0;
  const std::size_t slots = space.slots().size();
  std::vector<StateTensor> out;
  Tensor unit_buffer;
  std::exception_ptr failure;
  try {
    std::int64_t largest = 0;
    for (const model::Unit& unit : space.units()) largest = std::max(largest, unit.elements);
    unit_buffer = Tensor::empty({largest}, DType::f32, space.device());
    for (const std::string& kind : optimizer.state_kinds()) {
      for (const model::Slot& slot : space.slots()) {
        if (root) out.push_back({state_name(slot, kind), Tensor::empty(slot.parameter->shape(), DType::f32)});
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  comm::throw_if_any_failed(*comm, failure, "gathering the optimizer state");
  for (std::size_t k = 0; k < optimizer.state_kinds().size(); ++k) {
    const Tensor shard = optimizer.state(optimizer.state_kinds()[k]);
    for (const model::ShardRange& range : optimizer.ranges()) {
      const model::Unit& unit = space.units()[range.unit];
      const Tensor full = unit_buffer.slice(0, unit.elements);
      comm->all_gather(shard.slice(range.local, range.local + range.elements()), full, stream).wait();
      if (!root) continue;
      for (const std::size_t s : unit.slots) {
        const model::Slot& slot = space.slots()[s];
        const std::int64_t at = slot.offset - unit.begin;
        copy(out[k * slots + s].tensor, full.slice(at, at + slot.numel), stream);
      }
    }
  }
  synchronize(stream);
  return out;
}

std::vector<std::pair<std::string, Shape>> state_layout(const Optimizer& optimizer) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const std::string& kind : optimizer.state_kinds()) {
    for (const model::Slot& slot : optimizer.space().slots()) {
      out.emplace_back(state_name(slot, kind), slot.parameter->shape());
    }
  }
  return out;
}

void scatter_state(Optimizer& optimizer, const std::map<std::string, Tensor>& full) {
  const model::ParameterSpace& space = optimizer.space();
  for (const std::string& kind : optimizer.state_kinds()) {
    for (const model::Slot& slot : space.slots()) {
      const auto it = full.find(state_name(slot, kind));
      require(it != full.end(), optimizer.name(), ": no state '", state_name(slot, kind), "' to load");
      require(it->second.shape() == slot.parameter->shape() && it->second.dtype() == DType::f32,
              optimizer.name(), ": state '", it->first, "' is ", it->second, ", expected f32 ",
              slot.parameter->shape());
    }
  }
  for (const std::string& kind : optimizer.state_kinds()) {
    const Tensor& state = optimizer.state(kind);
    for (const Optimizer::Segment& s : optimizer.segments()) {
      const model::Slot& slot = space.slots()[s.slot];
      const Tensor source = full.at(state_name(slot, kind)).flatten().slice(s.begin - slot.offset, s.end - slot.offset);
      copy(state.slice(s.local, s.local + (s.end - s.begin)), source);
    }
  }
}

}  // namespace loom::optim
