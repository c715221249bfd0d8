// How loom's MPI collectives are laid out and which algorithm each call takes: plain data and
// pure functions of the sizes and the rank count (every rank decides alike), kept apart from the
// algorithms (collectives.hpp) so that they can be tested without MPI. The limits are where each
// algorithm stops beating the next on one node (benchmarks/allreduce_bench, in the same run as
// Open MPI's own collectives).
#pragma once

#include <cstdint>

namespace loom::comm::detail {

// `count` elements in `parts` contiguous blocks, the first count % parts one element longer.
struct BlockLayout {
  std::int64_t count;
  int parts;
  std::int64_t offset(int block) const;
  std::int64_t length(int block) const;
};

enum class AllReduceAlgorithm { local, exchange, recursive_doubling, ring };
enum class ScatterGatherAlgorithm { local, direct, ring };
enum class BroadcastAlgorithm { local, binomial, scatter_all_gather };

// bytes: the whole buffer (all_reduce, broadcast) or all ranks' blocks (reduce_scatter, all_gather).
// all_reduce: a direct exchange while each rank sends at most 64 KiB in all; recursive doubling up
// to 128 KiB on a power-of-two number of ranks above two; the ring beyond.
AllReduceAlgorithm choose_all_reduce(std::int64_t bytes, int size);
// reduce_scatter, all_gather: direct up to 1 MiB, and at any size on up to 4 ranks; the ring beyond.
ScatterGatherAlgorithm choose_scatter_gather(std::int64_t bytes, int size);
// broadcast: a binomial tree; from 512 KiB on more than two ranks, scatter then ring all-gather.
BroadcastAlgorithm choose_broadcast(std::int64_t bytes, int size);

// A message of `count` elements of `element_bytes` travels whole below 4 MiB, otherwise in
// segments of 256 KiB (each combined as it arrives, while still in cache); a message's sender and
// receiver derive the same segments from its count. Returns the elements per segment.
std::int64_t segment_elements(std::int64_t count, std::int64_t element_bytes);

}  // namespace loom::comm::detail
