// A job's ranks as a grid of data x tensor (tensor innermost), the groups that tensor-parallel
// layers and the data-parallel gradient synchronisation talk over (Megatron-LM's and torchtitan's
// 2-D layout). World rank w sits at
//   data rank   w / tensor        (the ranks of one data group hold the same part of every layer)
//   tensor rank w % tensor        (the ranks of one tensor group split each layer between them)
// so a tensor group is `tensor` consecutive world ranks, which launchers place on one host: the
// per-layer all-reduces stay on NVLink. A pipeline dimension would go outermost (before data),
// leaving both of these as they are.
//
// The coordinates and the placement checks are pure functions of plain data (below); DeviceMesh
// builds the two groups from the world communicator with split.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/topo/topology.hpp"

namespace loom::topo {

struct MeshShape {
  int data = 1;
  int tensor = 1;
  int ranks() const noexcept { return data * tensor; }
};

struct MeshCoords {
  int data = 0;
  int tensor = 0;
};

// The shape of a world of `world` ranks split into tensor groups of `tensor`; an invalid_argument
// Error unless tensor >= 1 divides world.
MeshShape mesh_shape(int world, int tensor);
MeshCoords mesh_coords(const MeshShape& shape, int world_rank);
// The world ranks of the tensor group (and of the data group) that world_rank belongs to, in
// their group's rank order.
std::vector<int> tensor_group_of(const MeshShape& shape, int world_rank);
std::vector<int> data_group_of(const MeshShape& shape, int world_rank);

// Checks that every tensor group runs on one host of `topology` (whose placement must have one
// place per rank of the mesh). A group that spans hosts is an invalid_argument Error naming it and
// its hosts, unless allow_across_hosts.
void check_tensor_groups(const Topology& topology, const MeshShape& shape, bool allow_across_hosts);
// The topology of one data group: the same hosts, and the places of its ranks alone (in data-rank
// order), for the hierarchical collectives of its gradient synchronisation.
Topology data_group_topology(const Topology& topology, const MeshShape& shape, int tensor_rank);

struct MeshOptions {
  int tensor = 1;                   // ranks per tensor group; must divide the world
  bool allow_tensor_across_hosts = false;
};

class DeviceMesh {
 public:
  // Collective over world (two splits). topology: where every rank runs (detected or declared);
  // with one, the tensor groups are checked to sit inside hosts before anything is split. world
  // must outlive the mesh.
  DeviceMesh(comm::Communicator& world, const MeshOptions& options, const Topology* topology = nullptr);

  const MeshShape& shape() const noexcept { return shape_; }
  const MeshCoords& coords() const noexcept { return coords_; }
  comm::Communicator& world() const noexcept { return world_; }
  comm::Communicator& data() const noexcept { return *data_; }
  comm::Communicator& tensor() const noexcept { return *tensor_; }
  // "mesh: 2 data x 2 tensor; tensor groups [0 1] [2 3]; data groups [0 2] [1 3]", with each
  // group's hosts when a topology was given.
  std::string describe() const;

 private:
  comm::Communicator& world_;
  MeshShape shape_;
  MeshCoords coords_;
  std::vector<std::string> host_names_;  // per world rank, when a topology was given
  std::unique_ptr<comm::Communicator> data_, tensor_;
};

}  // namespace loom::topo
