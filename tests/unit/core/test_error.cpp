#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "loom/core/error.hpp"
#include "loom/core/process.hpp"

using loom::Error;
using loom::ErrorCategory;

namespace {
// Sets an environment variable for one scope and restores the previous state after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old, had_ = true;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, previous_.c_str(), 1); else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string previous_;
  bool had_ = false;
};

// All launcher variables cleared for the scope.
struct NoLauncher {
  ScopedEnv a{"OMPI_COMM_WORLD_RANK", nullptr}, b{"PMIX_RANK", nullptr}, c{"PMI_RANK", nullptr},
      d{"SLURM_PROCID", nullptr}, e{"RANK", nullptr};
};
}  // namespace

TEST_CASE("Error carries its category, detail and a readable message", "[error]") {
  NoLauncher clean;
  const Error error(ErrorCategory::corrupt_data, "checksum mismatch in shard_0003.bin");
  CHECK(error.category() == ErrorCategory::corrupt_data);
  CHECK(error.detail() == "checksum mismatch in shard_0003.bin");
  CHECK(error.rank() == -1);
  CHECK(std::string(error.what()) == "loom corrupt data error: checksum mismatch in shard_0003.bin");
}

TEST_CASE("every category has its own name", "[error]") {
  const ErrorCategory all[] = {ErrorCategory::invalid_argument, ErrorCategory::cuda, ErrorCategory::nccl,
                               ErrorCategory::mpi, ErrorCategory::timeout, ErrorCategory::io,
                               ErrorCategory::corrupt_data, ErrorCategory::out_of_memory};
  CHECK(loom::to_string(ErrorCategory::invalid_argument) == "invalid argument");
  CHECK(loom::to_string(ErrorCategory::timeout) == "timeout");
  for (auto a : all) {
    for (auto b : all) {
      if (a != b) CHECK(loom::to_string(a) != loom::to_string(b));
    }
  }
}

TEST_CASE("Error names the launcher rank when there is one", "[error]") {
  NoLauncher clean;
  SECTION("Open MPI's rank wins over the others") {
    ScopedEnv ompi("OMPI_COMM_WORLD_RANK", "3");
    ScopedEnv torchrun("RANK", "7");
    const Error error(ErrorCategory::timeout, "all_reduce of 4096 f32 waited 30 s");
    CHECK(error.rank() == 3);
    CHECK(std::string(error.what()) == "loom timeout error [rank 3]: all_reduce of 4096 f32 waited 30 s");
  }
  SECTION("SLURM and torchrun variables are read when Open MPI's are absent") {
    ScopedEnv slurm("SLURM_PROCID", "12");
    CHECK(loom::launcher_rank() == 12);
  }
  SECTION("garbage is ignored rather than misreported") {
    ScopedEnv torchrun("RANK", "2x");
    CHECK_FALSE(loom::launcher_rank().has_value());
    ScopedEnv negative("PMI_RANK", "-1");
    CHECK_FALSE(loom::launcher_rank().has_value());
  }
  SECTION("an explicit rank overrides the environment") {
    ScopedEnv ompi("OMPI_COMM_WORLD_RANK", "3");
    const Error error(ErrorCategory::nccl, "peer vanished", 5);
    CHECK(error.rank() == 5);
    CHECK(std::string(error.what()).find("[rank 5]") != std::string::npos);
  }
}

TEST_CASE("require and fail format the offending values", "[error]") {
  NoLauncher clean;
  CHECK_NOTHROW(loom::require(true, "never formatted"));
  try {
    loom::require(2 + 2 == 5, "expected ", 5, " got ", 4, " for '", "x", "'");
    FAIL("require(false) did not throw");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::invalid_argument);
    CHECK(error.detail() == "expected 5 got 4 for 'x'");
  }
  CHECK_THROWS_AS(loom::fail(ErrorCategory::io, "cannot open ", "/nonexistent"), Error);
}
