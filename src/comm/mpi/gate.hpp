// The MPI backend's arrival gate: before a collective runs as MPI's blocking call, every rank learns
// that every other rank has reached the same collective, by a dissemination barrier of small
// nonblocking messages (ceil(log2 size) rounds; in round k a rank tells rank + 2^k and hears from
// rank - 2^k) waited for by MpiTransfers. A rank whose peer never comes therefore waits in the gate,
// sleeping after the first 100 ms and answering its peers, instead of spinning inside MPI for the
// whole timeout. Each message also carries the call's number among the collectives and its
// signature (operation, dtype, count, reduce op, root), so ranks that make different collectives
// fail with an Error naming both calls instead of hanging or corrupting each other's data.
// On two ranks the gate costs one small message each way per collective.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "loom/comm/communicator.hpp"
#include <memory>
#include <vector>

#include "src/comm/mpi/transfers.hpp"

namespace loom::comm::detail {

enum class CollectiveKind : std::int64_t { all_reduce, reduce, broadcast, all_gather, reduce_scatter, barrier, split };

// What every rank making the same collective passes, packed into 64 bits: kind (3 bits), reduce
// op (3), dtype (6), root (20), elements or bytes (32; MPI counts are ints).
struct CollectiveSignature {
  CollectiveKind kind = CollectiveKind::barrier;
  int op = -1;      // ReduceOp, or -1
  int dtype = -1;   // DType, or -1
  int root = -1;
  std::int64_t count = 0;

  std::int64_t pack() const;
  static CollectiveSignature unpack(std::int64_t packed);
  std::string describe() const;  // "all_reduce(1000 x f32, sum)"
};

class MpiGate {
 public:
  // comm: the communicator's own (duplicated here for the gate's messages).
  MpiGate(MPI_Comm comm, int rank, int size);
  ~MpiGate();
  MpiGate(const MpiGate&) = delete;
  MpiGate& operator=(const MpiGate&) = delete;
  // Leaves the gate's communicator allocated at destruction (an aborted communicator's).
  void keep_communicator() { keep_ = true; }

  // Returns once every rank has reached its collective number `index`. If a rank's collective
  // there differs from `signature` (every rank learns whether all agree), aborts the communicator
  // through `status` and throws an invalid_argument Error naming the calls; throws the abort if the
  // communicator is aborted meanwhile.
  void pass(std::int64_t index, const CollectiveSignature& signature, MpiStatus& status, MpiTransfers& transfers,
            const std::string& what);

 private:
  struct Buffers;
  void run(std::int64_t index, const CollectiveSignature& signature, Buffers& buffers, MpiTransfers& transfers,
           const std::string& what);

  MPI_Comm gate_ = MPI_COMM_NULL;
  int rank_, size_, rounds_ = 0;
  bool keep_ = false;
  std::shared_ptr<Buffers> buffers_;  // reused; given up to the transfers if a pass is abandoned
};

}  // namespace loom::comm::detail
