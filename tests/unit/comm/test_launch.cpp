// Launcher detection from crafted environments: each launcher's variables, their precedence,
// overrides, and every misconfiguration as a named error; the device choice by local rank.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "loom/comm/launch.hpp"
#include "support/tensor_checks.hpp"

using loom::ErrorCategory;
using loom::comm::detect_launch;
using loom::comm::LaunchInfo;
using loom::test::IsError;

namespace {

loom::comm::Environment environment(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("launch: each launcher's variables, in order of precedence", "[comm][launch]") {
  const LaunchInfo none = detect_launch({}, environment({}));
  REQUIRE(none.launcher == "single process");
  REQUIRE((none.rank == 0 && none.size == 1 && none.local_rank == 0));

  const LaunchInfo ompi = detect_launch(
      {}, environment({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                       {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "9"}}));
  REQUIRE(ompi.launcher == "Open MPI");
  REQUIRE((ompi.rank == 3 && ompi.size == 8 && ompi.local_rank == 1));

  const LaunchInfo pmi = detect_launch({}, environment({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}}));
  REQUIRE((pmi.launcher == "PMI" && pmi.rank == 2 && pmi.size == 4));

  const LaunchInfo slurm = detect_launch(
      {}, environment({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "9"}, {"SLURM_LOCALID", "2"}, {"RANK", "0"},
                       {"WORLD_SIZE", "2"}}));
  REQUIRE((slurm.launcher == "SLURM" && slurm.rank == 5 && slurm.size == 9 && slurm.local_rank == 2));

  const LaunchInfo torchrun = detect_launch(
      {}, environment({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
                       {"MASTER_PORT", "29500"}}));
  REQUIRE((torchrun.launcher == "torchrun" && torchrun.rank == 1 && torchrun.master_addr == "node7" &&
           torchrun.master_port == 29500));

  const LaunchInfo overridden = detect_launch({.rank = 0, .size = 2}, environment({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  REQUIRE((overridden.launcher == "override" && overridden.rank == 0 && overridden.size == 2));
}

TEST_CASE("launch: misconfigurations are named errors", "[comm][launch]") {
  REQUIRE_THROWS_MATCHES(detect_launch({}, environment({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}})),
                         loom::Error, IsError(ErrorCategory::invalid_argument, {"Open MPI", "rank 4", "world of 4"}));
  REQUIRE_THROWS_MATCHES(detect_launch({}, environment({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "4"}})), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"SLURM_PROCID='x1'"}));
  REQUIRE_THROWS_MATCHES(detect_launch({}, environment({{"PMI_RANK", "0"}})), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"PMI set PMI_RANK but not PMI_SIZE"}));
  REQUIRE_THROWS_MATCHES(detect_launch({}, environment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}})),
                         loom::Error, IsError(ErrorCategory::invalid_argument, {"without MASTER_ADDR"}));
  REQUIRE_THROWS_MATCHES(
      detect_launch({}, environment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}})),
      loom::Error, IsError(ErrorCategory::invalid_argument, {"MASTER_PORT in 1..65535"}));
  REQUIRE_NOTHROW(detect_launch({}, environment({{"RANK", "0"}, {"WORLD_SIZE", "1"}})));  // one process needs no rendezvous
  REQUIRE_THROWS_MATCHES(detect_launch({.rank = 2}, environment({})), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"override", "rank 2", "world of 1"}));
}

TEST_CASE("launch: the device follows the local rank", "[comm][launch]") {
  LaunchInfo info;
  info.size = 8;
  info.local_rank = 3;
  REQUIRE(loom::comm::device_for(info, 0) == loom::Device::cpu());
  REQUIRE(loom::comm::device_for(info, 4) == loom::Device::cuda(3));
  REQUIRE_THROWS_MATCHES(loom::comm::device_for(info, 2), loom::Error,
                         IsError(ErrorCategory::invalid_argument, {"local rank 3", "2 GPUs", "allow GPU sharing"}));
  REQUIRE(loom::comm::device_for(info, 2, true) == loom::Device::cuda(1));
}

TEST_CASE("launch: torchrun's workers inside a SLURM allocation follow torchrun, not SLURM", "[comm][launch]") {
  // srun torchrun: every worker inherits its srun task's SLURM_* variables.
  const LaunchInfo info = detect_launch(
      {}, environment({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                       {"TORCHELASTIC_RUN_ID", "job7"}, {"RANK", "13"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "5"},
                       {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}}));
  REQUIRE(info.launcher == "torchrun");
  REQUIRE((info.rank == 13 && info.size == 16 && info.local_rank == 5));
  REQUIRE(info.master_addr == "node0");
}
