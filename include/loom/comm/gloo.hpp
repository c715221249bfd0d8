// The Gloo backend: CPU tensors between processes that no MPI launcher started (torchrun, a
// Kubernetes PyTorchJob, srun without MPI support), over Gloo's TCP connections. Every call is
// asynchronous and runs on the communicator's own thread, in order; the collectives are loom's
// algorithms over Gloo's point-to-point transfers (src/comm/gloo/), so a call that its peers do
// not join within CommOptions::timeout fails naming the peer it waited for, the communicator is
// aborted, and the peers are told why; a peer whose process ends fails the calls that wait on it
// at once. The ranks find each other through loom's rendezvous (rendezvous.hpp): every rank's
// connection addresses are exchanged once, authenticated when the job has a secret. Gloo's
// connections themselves are not authenticated or encrypted: keep them on a trusted network.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::comm {

// Every rank's blob on every rank, in rank order: a rendezvous (tcp_all_gather_blobs or
// file_all_gather_blobs) bound to this job.
using BlobExchange = std::function<std::vector<std::vector<unsigned char>>(std::span<const unsigned char> mine)>;

struct GlooOptions {
  // Where this rank accepts its peers' connections: a network interface (LOOM_GLOO_IFNAME, or
  // GLOO_SOCKET_IFNAME as PyTorch reads it), else a host name or address that resolves to one of
  // this host's (default: the host's name).
  std::string interface;
  std::string hostname;
};

// LOOM_GLOO_IFNAME / GLOO_SOCKET_IFNAME, then LOOM_GLOO_HOSTNAME; `local_job` (every rank on this
// host) defaults the address to 127.0.0.1, else to the host's name.
GlooOptions gloo_options_from_environment(bool local_job);

// Collective over the `size` processes: connects every pair of ranks and returns this rank's
// communicator. Throws when loom was built without Gloo, when the address cannot be used (naming
// it and the variables that choose it), or when the exchange or a connection fails.
std::unique_ptr<Communicator> make_gloo_communicator(int rank, int size, const BlobExchange& exchange,
                                                     const GlooOptions& gloo = {}, const CommOptions& options = {});

// This loom has the Gloo backend.
bool gloo_built();

}  // namespace loom::comm
