// What every optimizer shares: the part of a parameter space it updates (all of it, or one rank's
// shard under ZeRO), its state as packed fp32 buffers over exactly that part (fp32 master copies
// of parameters stored in f16/bf16, whose stored values are rewritten from them in the same fused
// pass; moments), a step counter, and access to its state for checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/model/parameter_space.hpp"

namespace loom::optim {

// One tensor of optimizer state, named after its parameter ("h0.ln1.weight.exp_avg").
struct StateTensor {
  std::string name;
  Tensor tensor;
};

// Which optimizer, for memory predictions (shard/memory.hpp) and the trainer's options.
enum class OptimizerKind { adamw, sgd_momentum, sgd };
// fp32 values it keeps per parameter element besides the master: 2, 1 or 0.
int moments_per_element(OptimizerKind kind) noexcept;

class Optimizer {
 public:
  // ranges: the part of the space to update, from space.shard(rank) (ZeRO) or space.whole()
  // (empty: the whole space). The space must outlive the optimizer and keep its layout.
  Optimizer(model::ParameterSpace& space, std::vector<model::ShardRange> ranges);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update with learning rate lr; every gradient is multiplied by grad_scale first (loss
  // unscaling and clipping in the same pass).
  virtual void step(float lr, float grad_scale = 1.0f, StreamRef stream = {}) = 0;
  virtual std::string name() const = 0;  // "adamw", "sgd": checkpoints refuse another one

  // The gradients of the ranges are read from the space's flat gradient buffer, unless a packed
  // buffer of local_elements() f32 is given here (ZeRO-2 keeps only its shard of the gradient).
  void read_gradients_from(Tensor packed);
  // The gradient tensors the next step reads (their norm is the clipping norm of this part).
  std::vector<Tensor> gradients() const;

  // The kinds of state, each one packed fp32 buffer of local_elements(): the moments
  // ("exp_avg", "exp_avg_sq"; "momentum_buffer"), then "master" for 16-bit storage.
  const std::vector<std::string>& state_kinds() const noexcept { return kinds_; }
  const Tensor& state(const std::string& kind) const;
  std::int64_t local_elements() const noexcept { return local_elements_; }
  const std::vector<model::ShardRange>& ranges() const noexcept { return ranges_; }
  // Whether the ranges miss part of the space (another rank updates it).
  bool sharded() const noexcept { return local_elements_ < space_.elements(); }
  const model::ParameterSpace& space() const noexcept { return space_; }
  // Bytes of state (masters and moments) this optimizer holds.
  std::int64_t state_bytes() const noexcept;

  // Every state tensor, per parameter ("<param>.<kind>", shaped like it), as views; needs an
  // unsharded optimizer (a sharded one: optim::gather_state in state_io.hpp).
  std::vector<StateTensor> state_tensors() const;
  // The fp32 master of slot i of the space (undefined when the storage is f32); unsharded only.
  Tensor master(std::size_t slot) const;

  std::int64_t steps_taken() const noexcept { return steps_; }
  void set_steps_taken(std::int64_t steps);

  // A parameter's elements [begin, end) of the space inside one range, kept at `local`.
  struct Segment {
    std::size_t slot = 0;
    std::int64_t begin = 0, end = 0, local = 0;
    bool decay = true;
  };
  const std::vector<Segment>& segments() const noexcept { return segments_; }

 protected:
  // Adds a state kind: a zeroed packed fp32 buffer.
  Tensor add_state(std::string kind);
  // What the update of a segment writes (its master, or the stored value), its gradient, the
  // 16-bit copy to refresh (undefined for f32 storage), and a state buffer's part of it.
  Tensor updated(const Segment& s) const;
  Tensor grad(const Segment& s) const;
  Tensor low_precision_copy(const Segment& s) const;
  static Tensor local(const Tensor& state, const Segment& s);
  void count_step() noexcept { ++steps_; }
  // Throws unless the space still has the layout this optimizer was built on.
  void require_current_layout() const;
  // Called by derived constructors after their moments: adds the masters last.
  void add_masters();

 private:
  model::ParameterSpace& space_;
  std::vector<model::ShardRange> ranges_;
  std::vector<Segment> segments_;
  std::int64_t local_elements_ = 0;
  std::vector<std::string> kinds_;
  std::vector<Tensor> states_;
  Tensor master_, packed_grads_;
  std::int64_t steps_ = 0;
  std::uint64_t layout_version_ = 0;
};

}  // namespace loom::optim
