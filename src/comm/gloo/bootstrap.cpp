#include "src/comm/gloo/bootstrap.hpp"

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <csignal>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "loom/core/error.hpp"

namespace loom::comm {

GlooOptions gloo_options_from_environment(bool local_job) {
  GlooOptions options;
  for (const char* name : {"LOOM_GLOO_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      options.interface = value;
      return options;
    }
  }
  if (const char* value = std::getenv("LOOM_GLOO_HOSTNAME"); value != nullptr && *value != '\0') {
    options.hostname = value;
    return options;
  }
  if (local_job) {
    options.hostname = "127.0.0.1";
    return options;
  }
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) options.hostname = name;
  return options;
}

namespace detail {

namespace {

void put_word(std::vector<unsigned char>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(value >> shift));
}

// The address rank `from` published for its pair with rank `to`: `from`'s blob holds one
// length-prefixed address per other rank, in rank order.
std::vector<char> address_for(const std::vector<unsigned char>& blob, int from, int to, int size) {
  std::size_t at = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == from) continue;
    require(blob.size() - at >= 4, "Gloo bootstrap: rank ", from, "'s addresses are cut short");
    const std::size_t length = std::size_t{blob[at]} << 24 | std::size_t{blob[at + 1]} << 16 |
                               std::size_t{blob[at + 2]} << 8 | blob[at + 3];
    at += 4;
    require(length <= blob.size() - at, "Gloo bootstrap: rank ", from, "'s addresses are cut short");
    if (peer == to) return {blob.begin() + static_cast<std::ptrdiff_t>(at), blob.begin() + static_cast<std::ptrdiff_t>(at + length)};
    at += length;
  }
  fail(ErrorCategory::corrupt_data, "Gloo bootstrap: rank ", from, " published no address for rank ", to);
}

}  // namespace

std::shared_ptr<gloo::transport::Device> make_gloo_device(const GlooOptions& options) {
  // Gloo writes to sockets whose peer may have closed them (its process ended): with SIGPIPE's
  // default action that write would end this process silently, instead of failing the call with
  // an error naming the peer. A handler the program installed is left alone.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  gloo::transport::tcp::attr attr;
  if (!options.interface.empty()) attr.iface = options.interface;
  else attr.hostname = options.hostname;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    fail(ErrorCategory::invalid_argument, "Gloo communicator: cannot listen on ",
         options.interface.empty() ? "host '" + options.hostname + "'" : "interface '" + options.interface + "'",
         " (", e.what(), "): set LOOM_GLOO_IFNAME to the network interface the ranks reach each other on "
         "(e.g. eth0), or LOOM_GLOO_HOSTNAME to this host's address");
  }
}

std::shared_ptr<gloo::transport::Context> connect_gloo_mesh(const std::shared_ptr<gloo::transport::Device>& device,
                                                           int rank, int size, const BlobExchange& exchange,
                                                           std::chrono::milliseconds timeout) {
  std::shared_ptr<gloo::transport::Context> context = device->createContext(rank, size);
  context->setTimeout(timeout);
  std::vector<unsigned char> mine;
  try {
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const std::vector<char> address = context->createPair(peer)->address().bytes();
      put_word(mine, static_cast<std::uint32_t>(address.size()));
      mine.insert(mine.end(), address.begin(), address.end());
    }
  } catch (const std::exception& e) {
    fail(ErrorCategory::io, "Gloo communicator (rank ", rank, " of ", size, "): cannot open its connections: ",
         e.what());
  }
  if (size == 1) mine.push_back(0);  // nothing to exchange, but a blob is never empty
  const std::vector<std::vector<unsigned char>> blobs = exchange(mine);
  require(blobs.size() == static_cast<std::size_t>(size), "Gloo bootstrap: the exchange returned ", blobs.size(),
          " blobs for ", size, " ranks");
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const std::vector<char> address = address_for(blobs[static_cast<std::size_t>(peer)], peer, rank, size);
    try {
      context->getPair(peer)->connect(address);
    } catch (const std::exception& e) {
      fail(ErrorCategory::io, "Gloo communicator (rank ", rank, " of ", size, "): cannot connect to rank ", peer,
           " within ", timeout.count(), " ms: ", e.what(),
           " (is its address reachable from here? LOOM_GLOO_IFNAME or LOOM_GLOO_HOSTNAME choose the address a rank "
           "publishes)");
    }
  }
  return context;
}

}  // namespace detail
}  // namespace loom::comm
