#include "loom/topo/report.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "loom/core/error.hpp"

namespace loom::topo {

namespace {

std::string format(const char* fmt, double a) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, a);
  return buffer;
}

std::string bytes_text(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream out;
  out << value << " " << units[unit];
  return out.str();
}

}  // namespace

std::string link_matrix(const Host& host) {
  std::ostringstream out;
  const int n = static_cast<int>(host.gpus.size());
  out << "host " << host.name << ": " << n << " GPU(s)" << (host.nvswitch ? ", NVSwitch" : "") << ", PCIe "
      << host.pcie_gbps << " GB/s";
  if (host.socket_link_gbps > 0) out << ", socket link " << host.socket_link_gbps << " GB/s";
  out << "\n";
  if (n > 0) {
    out << "       ";
    for (int b = 0; b < n; ++b) out << "  GPU" << b << (b < 10 ? " " : "");
    out << "  socket\n";
    for (int a = 0; a < n; ++a) {
      out << "GPU" << a << (a < 10 ? "   " : "  ");
      for (int b = 0; b < n; ++b) {
        std::string cell;
        if (a == b) cell = "X";
        else if (const int links = nvlinks_between(host, a, b); links > 0) cell = "NV" + std::to_string(links);
        else cell = host.gpus[static_cast<std::size_t>(a)].socket == host.gpus[static_cast<std::size_t>(b)].socket ? "NODE" : "SYS";
        out << "  " << cell << std::string(cell.size() < 5 ? 5 - cell.size() : 0, ' ');
      }
      out << "  " << host.gpus[static_cast<std::size_t>(a)].socket << "    " << host.gpus[static_cast<std::size_t>(a)].name
          << "\n";
    }
  }
  for (const Nic& nic : host.nics) out << "NIC " << nic.name << ": " << nic.gbits << " Gb/s, socket " << nic.socket << "\n";
  out << "Legend: X = self, NV# = # NVLinks (through NVSwitch: the GPU's links), NODE = PCIe within a socket, "
         "SYS = PCIe across sockets\n";
  return out.str();
}

std::vector<std::int64_t> message_sizes(std::int64_t min_bytes, std::int64_t max_bytes, std::int64_t factor) {
  require(min_bytes > 0 && max_bytes >= min_bytes && factor >= 2, "message sizes: need 0 < min <= max and factor >= 2, "
          "got ", min_bytes, ", ", max_bytes, ", ", factor);
  std::vector<std::int64_t> sizes;
  for (std::int64_t s = min_bytes; s <= max_bytes; s *= factor) sizes.push_back(s);
  return sizes;
}

std::string plan_report(const Planner& planner, Collective collective, const std::vector<std::int64_t>& sizes) {
  const CostModel& model = planner.model();
  std::ostringstream out;
  out << model.ranks() << " ranks on " << model.hosts() << " host(s), up to " << model.ranks_per_host()
      << " per host; effective bandwidth inside a host "
      << (std::isfinite(model.intra_host_gbps()) ? format("%.1f", model.intra_host_gbps()) + " GB/s" : "-")
      << ", network per host " << (model.hosts() > 1 ? format("%.1f", model.network_gbps()) + " GB/s" : "-") << "\n";
  for (std::size_t h = 0; h < planner.ring_orders().size(); ++h) {
    const auto& order = planner.ring_orders()[h];
    if (order.size() < 2 || h > 0) continue;  // hosts are listed once: the first one's order
    out << "ring order inside host 0 (local ranks):";
    for (int i : order) out << " " << i;
    out << "\n";
  }
  out << "recommended gradient bucket: " << bytes_text(planner.recommended_bucket_bytes()) << "\n\n";
  const std::vector<Plan> first = planner.candidates(collective, sizes.front());
  out << "predicted " << to_string(collective) << "\n" << "        size";
  for (const Plan& p : first) out << "  " << std::string(9 - to_string(p.algorithm).size(), ' ') << to_string(p.algorithm) << " us  busbw";
  out << "  choice\n";
  for (const std::int64_t bytes : sizes) {
    out << std::string(12 - std::min<std::size_t>(12, std::to_string(bytes).size()), ' ') << bytes;
    for (const Plan& p : planner.candidates(collective, bytes)) {
      out << "  " << format("%12.1f", p.prediction.seconds * 1e6) << format("%7.1f", p.prediction.busbw_gbps);
    }
    out << "  " << to_string(planner.choose(collective, bytes).algorithm) << "\n";
  }
  return out.str();
}

}  // namespace loom::topo
