// Collectives that follow the topology. make_topology_aware wraps a job's communicator: its
// all_reduce, reduce_scatter and all_gather run either as the wrapped (flat) call or as loom's
// hierarchical schedule over communicators split from it, one per host (ranks ordered by the
// planner's ring order, so NVLink-bridged pairs are neighbours) and one per local rank across the
// hosts:
//   all_reduce      intra reduce-scatter, inter all-reduce of the shards, intra all-gather
//                   (counts padded to a multiple of the ranks per host; avg averages per stage)
//   reduce_scatter  the input permuted so that an intra reduce-scatter leaves each local rank the
//                   blocks of its peers on every host, then an inter reduce-scatter
//   all_gather      the reverse: inter all-gather, intra all-gather, un-permute
// Results equal the flat calls' whenever the values and their partial sums are representable;
// avg averages per stage (over the host, then over the hosts), so it rounds once more than a flat
// avg, and f16/bf16 partial results are rounded to 16 bits between stages. `automatic` asks the
// planner per call (by message size). The hierarchical schedule needs several hosts with the same
// number (> 1) of ranks each: then every call (flat ones too) runs in order on one worker thread,
// after the caller's stream work recorded when the call was made; otherwise (or with `flat`) every
// call is the wrapped communicator's own and nothing is split, and asking for `hierarchical` is an
// error. Construction checks that every rank has the same topology and choice.
#pragma once

#include <memory>

#include "loom/comm/communicator.hpp"
#include "loom/topo/planner.hpp"

namespace loom::topo {

enum class AlgorithmChoice { flat, hierarchical, automatic };
// "flat", "hier" or "auto"; anything else is an invalid_argument Error.
AlgorithmChoice parse_algorithm_choice(const std::string& name);

// Collective (it splits `flat`). topology: the job's, with one placement per rank of `flat`.
// `flat` must outlive the result.
std::unique_ptr<comm::Communicator> make_topology_aware(comm::Communicator& flat, const Topology& topology,
                                                        AlgorithmChoice choice = AlgorithmChoice::automatic);

}  // namespace loom::topo
