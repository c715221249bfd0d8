// The conformance suite every Communicator backend passes: each call x dtype x op x size, out of
// place and in place, on crafted inputs whose exact results are known in every dtype. Runs on one
// rank's communicator (all ranks of the group run it together) and returns the first failure it
// saw, described, or an empty string. Rank threads must not use Catch2's assertions (they are not
// thread-safe), hence a string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"

namespace loom::test {

struct ConformanceSizes {
  std::vector<std::int64_t> small{0, 1, 7, 1003};  // every dtype x op
  std::int64_t large = 786433;                      // ~3 MiB of f32, odd: sum only
};

std::string run_comm_conformance(comm::Communicator& comm, const ConformanceSizes& sizes = {});

// Rank r's element i: (r + 1) * (i % 5 + 1), a small integer exact in every dtype; n of them as
// `dtype` on `device`.
double contribution(int rank, std::int64_t i);
Tensor exact_values(DType dtype, std::int64_t n, int rank, Device device = Device::cpu());

}  // namespace loom::test
