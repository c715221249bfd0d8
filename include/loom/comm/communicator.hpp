// One interface for communication among the ranks of a job. Every call is asynchronous and
// returns a Work; a backend finishes its calls in the order they were made. Every call takes the
// caller's stream last, as kernels do: GPU backends start the call after the work enqueued on it
// so far (default: the device's default stream); CPU backends ignore it. Tensors are
// contiguous and live on the communicator's device; outputs may be the inputs (in place) where
// noted. Backends: in-process (threads as ranks), MPI (CPU processes), NCCL (one GPU per rank).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "loom/comm/work.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::comm {

enum class ReduceOp { sum, avg, max, min };
std::string_view to_string(ReduceOp op) noexcept;

// LOOM_DEBUG_COLLECTIVES=1 in the environment.
bool collective_checks_from_environment();
// LOOM_COMM_TIMEOUT_MS=N in the environment (a positive integer), else 5 minutes. Anything else is an
// invalid_argument Error naming the variable and its value.
std::chrono::milliseconds timeout_from_environment();

struct CommOptions {
  // A call that its peers do not join within this time fails with a timeout Error on the ranks
  // that made it, and the communicator is aborted (later calls fail at once) instead of hanging.
  // On the NCCL backend the time runs from when the call became the oldest in flight, so it
  // includes GPU work queued before it on the caller's stream (a kernel that hangs there fails it).
  std::chrono::milliseconds timeout = timeout_from_environment();
  // Before each call, check that every rank makes the same call (operation, count, dtype, op,
  // root, sequence number) and fail with an error naming the ranks and their calls if not.
  // Costs one small all-gather per call; for debugging.
  bool check_collectives = collective_checks_from_environment();
};

class Communicator {
 public:
  static constexpr int no_color = -1;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;             // where the tensors of every call must live
  virtual std::string_view backend() const = 0;  // "in-process", "mpi" or "nccl"

  // output = op over ranks of input, element-wise (f16/bf16 accumulate in fp32 on the CPU
  // backends). output may be input.
  virtual Work all_reduce(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream = {}) = 0;
  // root's output = op over ranks of input. Other ranks' output is not written and may be undefined.
  virtual Work reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root, StreamRef stream = {}) = 0;
  // tensor = root's tensor on every rank.
  virtual Work broadcast(const Tensor& tensor, int root, StreamRef stream = {}) = 0;
  // output (size x input.numel elements) = the inputs in rank order. input may be this rank's
  // block of output.
  virtual Work all_gather(const Tensor& input, const Tensor& output, StreamRef stream = {}) = 0;
  // output (input.numel / size elements) = this rank's block of op over ranks of input.
  virtual Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, StreamRef stream = {}) = 0;
  // Point to point: the k-th send from a to b delivers into the k-th recv on b from a; count and
  // dtype must match. A send may not complete before its recv is posted, so order calls as for
  // blocking sends (in a ring exchange, even ranks send first and odd ranks receive first).
  virtual Work send(const Tensor& tensor, int peer, StreamRef stream = {}) = 0;
  virtual Work recv(const Tensor& tensor, int peer, StreamRef stream = {}) = 0;
  virtual Work barrier(StreamRef stream = {}) = 0;

  // For a rank that cannot go on (its forward threw): fails this communicator's pending and later
  // calls here, and tells the peers, whose calls then fail within moments with an Error that
  // carries `reason`, instead of waiting out the timeout for this rank. Not collective; the
  // communicator is unusable afterwards. NCCL has no channel to tell its peers: it aborts here
  // only, and the peers fail at their timeout.
  virtual void abort(const std::string& reason) = 0;

  // Collective and blocking: every rank calls it after its earlier calls. Ranks passing the same
  // color form a new communicator, ranked by (key, old rank); no_color gives nullptr. The child
  // has the parent's backend, device and options and runs independently of it, except for its
  // timeout when one is given: a group whose calls wait longer by design (a checkpoint's commit
  // waits for the slowest rank's write) gets a timeout of its own (> 0).
  virtual std::unique_ptr<Communicator> split(int color, int key,
                                              std::optional<std::chrono::milliseconds> timeout = std::nullopt) = 0;
};

}  // namespace loom::comm
