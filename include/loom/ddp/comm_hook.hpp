// How one bucket of gradients is reduced across the data-parallel ranks. The GradientReducer calls
// a communication hook for each bucket once the bucket's gradients are final, in bucket order and
// identically on every rank, from the thread that runs backward. The hook starts the reduction and
// returns without waiting; the reducer waits for it in synchronize() and then runs its `finish`
// step. The built-in hooks: plain averaging in fp32, and fp16/bf16 compression.
//
// Writing a hook: the contract is that once `work` has completed and `finish` has run,
// bucket.gradients holds the average over all ranks of every rank's bucket.gradients. Issue only
// collectives that every rank issues in the same order (the hook runs in the same order
// everywhere). Tensors the reduction uses must outlive it: keep them in the hook's own state or
// capture them in `finish`. On a GPU, work on bucket.stream (the stream backward ran on) and pass
// it to the communicator's calls, which then wait for it. A hook that throws does not stop backward: the
// reducer reduces that bucket with a plain average (the other ranks wait for it) and
// synchronize() then fails on every rank with the hook's error.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::ddp {

struct GradBucket {
  int index = 0;         // 0 = the first bucket to be ready in backward
  Tensor gradients;      // flat f32 on the communicator's device: this rank's gradients, padding zero
  std::vector<std::string> parameter_names{};  // the parameters whose gradients it holds, in order
  StreamRef stream{};    // where the gradients were produced (CUDA); CPU: unused
  std::int64_t begin = 0;  // its first element in the parameter space
};

// A reduction in flight.
struct PendingReduction {
  comm::Work work;                 // completes when the communication is done
  std::function<void()> finish{};  // runs after `work`, on the caller of synchronize(); may be empty
};

using CommHook = std::function<PendingReduction(comm::Communicator& comm, const GradBucket& bucket)>;

// all_reduce(avg) of the fp32 gradients in place: the exact mean up to summation order.
CommHook average_hook();

// Gradient compression: the gradients, divided by the number of ranks, are cast to `wire` (f16 or
// bf16) with one rounding, summed across ranks in that dtype, and cast back into the fp32
// gradients. Half the bytes of fp32; the average carries about 2^-11 (f16) or 2^-8 (bf16) relative
// rounding error per summand. The division comes first so the 16-bit sum cannot overflow, which
// means f16 flushes gradients below about ranks x 3e-8 (half its smallest subnormal, times the
// ranks) to zero: with f16 compression, train with loss scaling (Precision::fp16) or prefer bf16,
// whose range is fp32's.
CommHook compression_hook(DType wire);

}  // namespace loom::ddp
