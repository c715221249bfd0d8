#include "loom/topo/mesh.hpp"

#include <set>
#include <sstream>

#include "loom/comm/agreement.hpp"
#include "loom/core/error.hpp"

namespace loom::topo {

namespace {

std::string list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? " " : "") << ranks[i];
  out << "]";
  return out.str();
}

}  // namespace

MeshShape mesh_shape(int world, int tensor) {
  require(world >= 1, "device mesh: the world must have ranks, got ", world);
  require(tensor >= 1 && world % tensor == 0, "device mesh: tensor groups of ", tensor, " ranks do not divide the ",
          world, " ranks of the job");
  return {world / tensor, tensor};
}

MeshCoords mesh_coords(const MeshShape& shape, int world_rank) {
  require(world_rank >= 0 && world_rank < shape.ranks(), "device mesh: rank ", world_rank, " is not in a mesh of ",
          shape.ranks(), " ranks");
  return {world_rank / shape.tensor, world_rank % shape.tensor};
}

std::vector<int> tensor_group_of(const MeshShape& shape, int world_rank) {
  const MeshCoords c = mesh_coords(shape, world_rank);
  std::vector<int> ranks;
  for (int t = 0; t < shape.tensor; ++t) ranks.push_back(c.data * shape.tensor + t);
  return ranks;
}

std::vector<int> data_group_of(const MeshShape& shape, int world_rank) {
  const MeshCoords c = mesh_coords(shape, world_rank);
  std::vector<int> ranks;
  for (int d = 0; d < shape.data; ++d) ranks.push_back(d * shape.tensor + c.tensor);
  return ranks;
}

void check_tensor_groups(const Topology& topology, const MeshShape& shape, bool allow_across_hosts) {
  const std::vector<RankPlace> places = topology.placement();
  require(static_cast<int>(places.size()) == shape.ranks(), "device mesh: the topology places ", places.size(),
          " ranks but the mesh has ", shape.ranks());
  if (allow_across_hosts) return;
  for (int d = 0; d < shape.data; ++d) {
    const std::vector<int> group = tensor_group_of(shape, d * shape.tensor);
    std::set<int> hosts;
    for (const int r : group) hosts.insert(places[static_cast<std::size_t>(r)].host);
    if (hosts.size() == 1) continue;
    std::string names;
    for (const int h : hosts) {
      names += names.empty() ? "" : ", ";
      names += topology.hosts[static_cast<std::size_t>(h)].name;
    }
    fail(ErrorCategory::invalid_argument, "device mesh: tensor group ", list(group), " spans hosts ", names,
         ": its all-reduces in every layer would cross the network. Launch ", shape.tensor,
         " consecutive ranks per host, choose a tensor size that fits in one host, or allow it explicitly");
  }
}

Topology data_group_topology(const Topology& topology, const MeshShape& shape, int tensor_rank) {
  require(tensor_rank >= 0 && tensor_rank < shape.tensor, "device mesh: tensor rank ", tensor_rank,
          " is not in a tensor group of ", shape.tensor);
  const std::vector<RankPlace> places = topology.placement();
  require(static_cast<int>(places.size()) == shape.ranks(), "device mesh: the topology places ", places.size(),
          " ranks but the mesh has ", shape.ranks());
  Topology group = topology;
  group.ranks.clear();
  for (const int r : data_group_of(shape, tensor_rank)) group.ranks.push_back(places[static_cast<std::size_t>(r)]);
  return group;
}

DeviceMesh::DeviceMesh(comm::Communicator& world, const MeshOptions& options, const Topology* topology)
    : world_(world) {
  // Checked on every rank before any split, and agreed: a rank that refuses must not leave the
  // others waiting in the split.
  std::exception_ptr invalid;
  try {
    shape_ = mesh_shape(world.size(), options.tensor);
    coords_ = mesh_coords(shape_, world.rank());
    if (topology != nullptr) {
      check_tensor_groups(*topology, shape_, options.allow_tensor_across_hosts);
      for (const RankPlace& place : topology->placement()) {
        host_names_.push_back(topology->hosts[static_cast<std::size_t>(place.host)].name);
      }
    }
  } catch (...) {
    invalid = std::current_exception();
  }
  comm::throw_if_any_failed(world, invalid, "building the device mesh");
  // Keyed by the other coordinate, so each group's ranks follow the mesh order.
  tensor_ = world.split(coords_.data, coords_.tensor);
  data_ = world.split(coords_.tensor, coords_.data);
}

std::string DeviceMesh::describe() const {
  std::ostringstream out;
  out << "mesh: " << shape_.data << " data x " << shape_.tensor << " tensor; tensor groups";
  auto hosts_of = [&](const std::vector<int>& group) {
    if (host_names_.empty()) return std::string();
    std::set<std::string> names;
    for (const int r : group) names.insert(host_names_[static_cast<std::size_t>(r)]);
    std::string joined;
    for (const std::string& n : names) joined += (joined.empty() ? " on " : ", ") + n;
    return joined;
  };
  for (int d = 0; d < shape_.data; ++d) {
    const std::vector<int> group = tensor_group_of(shape_, d * shape_.tensor);
    out << " " << list(group) << hosts_of(group);
  }
  out << "; data groups";
  for (int t = 0; t < shape_.tensor; ++t) {
    const std::vector<int> group = data_group_of(shape_, t);
    out << " " << list(group) << hosts_of(group);
  }
  return out.str();
}

}  // namespace loom::topo
