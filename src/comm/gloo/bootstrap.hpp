// Connecting a Gloo full mesh: the TCP device this process listens on, and the pairs of one
// communicator, whose addresses are exchanged by a rendezvous (the world's) or by a parent
// communicator (a split's).
#pragma once

#include <chrono>
#include <memory>

#include "loom/comm/gloo.hpp"

namespace gloo::transport {
class Context;
class Device;
}  // namespace gloo::transport

namespace loom::comm::detail {

std::shared_ptr<gloo::transport::Device> make_gloo_device(const GlooOptions& options);

// Creates a pair for every other rank, exchanges their addresses and connects them all.
std::shared_ptr<gloo::transport::Context> connect_gloo_mesh(const std::shared_ptr<gloo::transport::Device>& device,
                                                           int rank, int size, const BlobExchange& exchange,
                                                           std::chrono::milliseconds timeout);

}  // namespace loom::comm::detail
