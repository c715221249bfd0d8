// loom::init on one CPU process: loom's flags are taken out of argv and applied, the world is a
// working one-rank communicator, and misconfigurations are named errors.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "loom/comm/gloo.hpp"
#include "loom/comm/world.hpp"
#include "loom/core/gpu_info.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::test::IsError;

namespace {

// A mutable argv over copies of the given strings.
struct Args {
  explicit Args(std::vector<std::string> values) : strings(std::move(values)) {
    for (std::string& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    argc = static_cast<int>(strings.size());
    argv = pointers.data();
  }
  std::vector<std::string> remaining() const { return {argv, argv + argc}; }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
  int argc = 0;
  char** argv = nullptr;
};

}  // namespace

TEST_CASE("loom's flags are removed from argv and applied, and the program's own flags stay", "[comm]") {
  Args args({"train", "--steps", "10", "--loom-rank=1", "--loom-world-size", "4", "--loom-backend", "mpi",
             "--loom-allow-gpu-sharing", "--loom-device=cpu", "--loom-timeout-ms", "2500", "--lr=3e-3"});
  const loom::InitOptions options = loom::parse_init_flags(args.argc, args.argv);
  REQUIRE(args.remaining() == std::vector<std::string>{"train", "--steps", "10", "--lr=3e-3"});
  REQUIRE(args.argv[args.argc] == nullptr);
  REQUIRE(options.overrides.rank == 1);
  REQUIRE(options.overrides.size == 4);
  REQUIRE_FALSE(options.overrides.local_rank.has_value());
  REQUIRE(options.backend == "mpi");
  REQUIRE(options.allow_gpu_sharing);
  REQUIRE(options.device_type == loom::DeviceType::cpu);
  REQUIRE(options.comm.timeout == std::chrono::milliseconds(2500));
}

TEST_CASE("bad loom flags are named errors", "[comm]") {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"p", "--loom-rank", "-1"}, {"--loom-rank", "non-negative integer", "'-1'"}},
      {{"p", "--loom-rank"}, {"--loom-rank needs a value"}},
      {{"p", "--loom-device=tpu"}, {"--loom-device must be cpu or cuda", "'tpu'"}},
      {{"p", "--loom-colour=3"}, {"unknown flag --loom-colour"}},
      {{"p", "--loom-allow-gpu-sharing=yes"}, {"takes no value"}},
  };
  for (const auto& [argv, words] : cases) {
    Args args(argv);
    INFO(argv.back());
    REQUIRE_THROWS_MATCHES(loom::parse_init_flags(args.argc, args.argv), loom::Error,
                           IsError(ErrorCategory::invalid_argument, words));
  }
}

TEST_CASE("init on one CPU process gives a working one-rank world", "[comm]") {
  Args args({"prog", "--loom-device", "cpu", "--keep"});
  std::unique_ptr<loom::World> world = loom::init(args.argc, args.argv);
  REQUIRE(args.remaining() == std::vector<std::string>{"prog", "--keep"});
  REQUIRE(world->rank() == 0);
  REQUIRE(world->size() == 1);
  REQUIRE(world->device() == loom::Device::cpu());
  REQUIRE(world->comm().backend() == "in-process");
  const loom::Tensor t = loom::Tensor::from_vector(std::vector<float>{1.5f, -2}, {2});
  world->comm().all_reduce(t, t, loom::comm::ReduceOp::sum).wait();
  REQUIRE(t.to_vector<float>() == std::vector<float>{1.5f, -2});
}

TEST_CASE("init with the gloo backend on one process needs no rendezvous", "[comm]") {
  ::unsetenv("MASTER_ADDR");  // a one-process world has no one to meet
  ::unsetenv("LOOM_RENDEZVOUS_FILE");
  Args args({"prog", "--loom-device", "cpu", "--loom-backend", "gloo"});
  if (!loom::comm::gloo_built()) {
    REQUIRE_THROWS_MATCHES(loom::init(args.argc, args.argv), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"built without Gloo"}));
    return;
  }
  std::unique_ptr<loom::World> world = loom::init(args.argc, args.argv);
  REQUIRE(world->comm().backend() == "gloo");
  REQUIRE(world->size() == 1);
  const loom::Tensor t = loom::Tensor::from_vector(std::vector<float>{1.5f, -2}, {2});
  world->comm().all_reduce(t, t, loom::comm::ReduceOp::sum).wait();
  REQUIRE(t.to_vector<float>() == std::vector<float>{1.5f, -2});
}

TEST_CASE("init names misconfigurations", "[comm]") {
  const bool has_gpu = loom::cuda_runtime_status().available();
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"p", "--loom-device=cpu", "--loom-backend=nccl"}, {"nccl backend needs a GPU"}},
      {{"p", "--loom-device=cpu", "--loom-backend=tcp"}, {"unknown backend 'tcp'"}},
      {{"p", "--loom-device=cpu", "--loom-backend=in-process", "--loom-rank=0", "--loom-world-size=2"},
       {"in-process backend serves one process", "started 2"}},
      {{"p", "--loom-rank=3", "--loom-world-size=2"}, {"rank 3 is outside a world of 2"}},
  };
  for (const auto& [argv, words] : cases) {
    Args args(argv);
    INFO(argv.back());
    REQUIRE_THROWS_MATCHES(loom::init(args.argc, args.argv), loom::Error, IsError(ErrorCategory::invalid_argument, words));
  }
  if (!has_gpu) {
    Args args({"p", "--loom-device=cuda"});
    REQUIRE_THROWS_MATCHES(loom::init(args.argc, args.argv), loom::Error,
                           IsError(ErrorCategory::invalid_argument, {"a CUDA device was asked for, but there is none"}));
  }
}
