// ddp/replicas.hpp: the cross-rank checks of a data-parallel job, on in-process ranks: the same
// parameters (names, shapes, dtypes) and the same values, bit for bit, with the first difference
// named on every rank.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "loom/comm/in_process.hpp"
#include "loom/core/error.hpp"
#include "support/error_message.hpp"
#include "loom/ddp/replicas.hpp"
#include "loom/model/parameter_space.hpp"

using loom::DType;
using loom::Shape;
using loom::comm::Communicator;
using loom::model::Parameter;
using loom::model::ParameterSpace;

namespace {

struct Replica {
  std::vector<std::unique_ptr<Parameter>> parameters;
  std::unique_ptr<ParameterSpace> space;
};

// Three described parameters in two units, initialised from `seed` (the same bits on every rank).
Replica replica(DType dtype, std::uint64_t seed, const loom::model::SpaceLayout& layout = {}) {
  Replica r;
  for (const auto& [name, numel] : std::vector<std::pair<std::string, std::int64_t>>{{"w0", 70}, {"w1", 33}, {"w2", 5}}) {
    r.parameters.push_back(std::make_unique<Parameter>(name, Shape{numel}, dtype, loom::Device::cpu(), true));
    r.parameters.back()->set_init(loom::model::Init::normal(0.1f));
  }
  r.space = std::make_unique<ParameterSpace>(
      std::vector<loom::model::UnitSpec>{{"a", {r.parameters[0].get(), r.parameters[1].get()}}, {"b", {r.parameters[2].get()}}},
      layout);
  r.space->initialize(seed);
  return r;
}

}  // namespace

TEST_CASE("verify_same_values passes identical replicas and names the first parameter that diverged", "[ddp]") {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype);
    std::vector<std::string> errors(3);
    loom::comm::run_in_process(3, [&](Communicator& comm) {
      Replica r = replica(dtype, 5);
      loom::ddp::verify_same_values(comm, *r.space);  // identical: passes on every rank
      // One bit of one element of w1 on rank 2 (w2 differs too: the first difference is named).
      if (comm.rank() == 2) {
        auto* bytes = static_cast<unsigned char*>(r.parameters[1]->value().raw_data());
        bytes[3] ^= 1;
        static_cast<unsigned char*>(r.parameters[2]->value().raw_data())[0] ^= 1;
      }
      errors[static_cast<std::size_t>(comm.rank())] =
          loom::test::error_message([&] { loom::ddp::verify_same_values(comm, *r.space); });
    });
    for (const std::string& error : errors) {
      CHECK_THAT(error, Catch::Contains("replicas have diverged") && Catch::Contains("'w1'") &&
                            Catch::Contains("on rank 2 (of 3)"));
      CHECK_THAT(error, !Catch::Contains("'w2'"));
    }
  }
}

TEST_CASE("verify_same_values refuses sharded values, and verify_same_parameter_shapes ignores values", "[ddp]") {
  // Catch's assertions are not thread-safe: each rank records what it saw, checked afterwards.
  std::vector<std::string> differing_errors(2), sharded_errors(2);
  using loom::test::error_message;
  loom::comm::run_in_process(2, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    // Different values, the same names and shapes: the shape check passes, the value check names w0.
    Replica differing = replica(DType::f32, 10 + static_cast<std::uint64_t>(comm.rank()));
    std::vector<Parameter*> list;
    for (const auto& p : differing.parameters) list.push_back(p.get());
    loom::ddp::verify_same_parameter_shapes(comm, list);
    differing_errors[r] = error_message([&] { loom::ddp::verify_same_values(comm, *differing.space); });
    const Replica sharded = replica(DType::f32, 5, {.ranks = 2, .rank = comm.rank(), .values = loom::model::ValueMode::sharded});
    sharded_errors[r] = error_message([&] { loom::ddp::verify_same_values(comm, *sharded.space); });
  });
  for (const std::string& error : differing_errors) CHECK_THAT(error, Catch::Contains("diverged") && Catch::Contains("'w0'"));
  for (const std::string& error : sharded_errors) CHECK_THAT(error, Catch::Contains("sharded (ZeRO-3)"));
}
