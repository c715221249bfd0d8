// The device mesh (topo/mesh.hpp): the coordinates and groups as pure functions on crafted shapes;
// the placement check on declared topologies (two hosts of two GPUs: consecutive ranks fit, ranks
// interleaved over the hosts or a tensor group of four do not, unless allowed); and DeviceMesh on
// 4 in-process ranks, whose split groups hold exactly the world ranks the functions name, in their
// order, and which every rank refuses alike when a tensor group would span hosts.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "loom/comm/agreement.hpp"
#include "loom/comm/in_process.hpp"
#include "loom/topo/mesh.hpp"
#include "support/error_message.hpp"
#include "support/tensor_checks.hpp"

namespace topo = loom::topo;
using loom::ErrorCategory;
using loom::test::IsError;

namespace {

topo::Topology two_hosts_of_two() {
  topo::Topology t;
  for (int h = 0; h < 2; ++h) {
    topo::Host host;
    host.name = "node" + std::to_string(h);
    host.gpus.assign(2, topo::Gpu{});
    t.hosts.push_back(host);
  }
  return t;
}

}  // namespace

TEST_CASE("mesh coordinates and groups: tensor innermost", "[topo][mesh]") {
  const topo::MeshShape shape = topo::mesh_shape(6, 3);
  CHECK(shape.data == 2);
  CHECK(shape.tensor == 3);
  CHECK(topo::mesh_coords(shape, 4).data == 1);
  CHECK(topo::mesh_coords(shape, 4).tensor == 1);
  CHECK(topo::tensor_group_of(shape, 4) == std::vector<int>{3, 4, 5});
  CHECK(topo::data_group_of(shape, 4) == std::vector<int>{1, 4});
  CHECK(topo::tensor_group_of(topo::mesh_shape(4, 1), 2) == std::vector<int>{2});
  CHECK(topo::data_group_of(topo::mesh_shape(4, 4), 2) == std::vector<int>{2});
  REQUIRE_THROWS_MATCHES(topo::mesh_shape(6, 4), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"tensor groups of 4 ranks do not divide the 6"}));
  REQUIRE_THROWS_MATCHES(topo::mesh_shape(6, 0), loom::Error, IsError(ErrorCategory::invalid_argument, {"of 0 ranks"}));
  REQUIRE_THROWS_MATCHES(topo::mesh_coords(shape, 6), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"rank 6 is not in a mesh of 6"}));
}

TEST_CASE("a tensor group must sit in one host unless allowed", "[topo][mesh]") {
  topo::Topology t = two_hosts_of_two();
  topo::check_tensor_groups(t, topo::mesh_shape(4, 2), false);  // ranks 0-1 on node0, 2-3 on node1
  REQUIRE_THROWS_MATCHES(topo::check_tensor_groups(t, topo::mesh_shape(4, 4), false), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"tensor group [0 1 2 3] spans hosts node0, node1"}));
  topo::check_tensor_groups(t, topo::mesh_shape(4, 4), true);
  t.ranks = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};  // interleaved over the hosts
  REQUIRE_THROWS_MATCHES(topo::check_tensor_groups(t, topo::mesh_shape(4, 2), false), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"tensor group [0 1] spans hosts node0, node1"}));
  REQUIRE_THROWS_MATCHES(topo::check_tensor_groups(t, topo::mesh_shape(2, 2), false), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"places 4 ranks but the mesh has 2"}));
  // The data group of tensor rank 1 in the consecutive layout: ranks 1 and 3, GPU 1 of each host.
  const topo::Topology group = topo::data_group_topology(two_hosts_of_two(), topo::mesh_shape(4, 2), 1);
  REQUIRE(group.ranks.size() == 2);
  CHECK((group.ranks[0].host == 0 && group.ranks[0].gpu == 1 && group.ranks[1].host == 1 && group.ranks[1].gpu == 1));
}

TEST_CASE("DeviceMesh splits the world into the groups the mesh names, in their order", "[topo][mesh][comm]") {
  const topo::Topology t = two_hosts_of_two();
  std::vector<std::string> problems(4), descriptions(4);
  loom::comm::run_in_process(4, [&](loom::comm::Communicator& world) {
    const topo::DeviceMesh mesh(world, {.tensor = 2}, &t);
    std::string& problem = problems[static_cast<std::size_t>(world.rank())];
    const topo::MeshShape shape = mesh.shape();
    // Each group gathers its members' world ranks: they must be the named group, in order.
    const std::vector<std::string> tensor_members = loom::comm::all_gather_texts(mesh.tensor(), std::to_string(world.rank()));
    const std::vector<std::string> data_members = loom::comm::all_gather_texts(mesh.data(), std::to_string(world.rank()));
    std::vector<std::string> want_tensor, want_data;
    for (const int r : topo::tensor_group_of(shape, world.rank())) want_tensor.push_back(std::to_string(r));
    for (const int r : topo::data_group_of(shape, world.rank())) want_data.push_back(std::to_string(r));
    if (tensor_members != want_tensor) problem += "tensor group differs; ";
    if (data_members != want_data) problem += "data group differs; ";
    if (mesh.tensor().rank() != mesh.coords().tensor || mesh.data().rank() != mesh.coords().data) problem += "ranks; ";
    descriptions[static_cast<std::size_t>(world.rank())] = mesh.describe();
  });
  CHECK(problems == std::vector<std::string>(4));
  CHECK(descriptions[0] == "mesh: 2 data x 2 tensor; tensor groups [0 1] on node0 [2 3] on node1; data groups [0 2] on "
                           "node0, node1 [1 3] on node0, node1");
  CHECK(descriptions == std::vector<std::string>(4, descriptions[0]));
}

TEST_CASE("every rank refuses a mesh whose tensor group spans hosts, naming it", "[topo][mesh][comm]") {
  topo::Topology t = two_hosts_of_two();
  t.ranks = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  std::vector<std::string> errors(4);
  loom::comm::run_in_process(4, [&](loom::comm::Communicator& world) {
    errors[static_cast<std::size_t>(world.rank())] =
        loom::test::error_message([&] { topo::DeviceMesh mesh(world, {.tensor = 2}, &t); });
  });
  for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("tensor group [0 1] spans hosts node0, node1"));
}
