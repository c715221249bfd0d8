// src/comm/mpi/plan.hpp: block layouts, segments and the algorithm each MPI collective takes.
#include <catch2/catch.hpp>

#include "src/comm/mpi/plan.hpp"

using namespace loom::comm::detail;

TEST_CASE("a block layout covers every element once, the first count % parts blocks one longer", "[comm][mpi]") {
  for (std::int64_t count : {0, 1, 3, 7, 8, 1003}) {
    for (int parts : {1, 2, 3, 4, 7}) {
      const BlockLayout layout{count, parts};
      std::int64_t next = 0;
      for (int b = 0; b < parts; ++b) {
        INFO("count " << count << " parts " << parts << " block " << b);
        REQUIRE(layout.offset(b) == next);
        REQUIRE(layout.length(b) == count / parts + (b < count % parts ? 1 : 0));
        next += layout.length(b);
      }
      REQUIRE(next == count);
    }
  }
}

TEST_CASE("a message is segmented from 4 MiB on, in 256 KiB pieces", "[comm][mpi]") {
  REQUIRE(segment_elements(0, 4) == 1);
  REQUIRE(segment_elements(1000, 4) == 1000);                    // whole
  REQUIRE(segment_elements((4 << 20) / 4 - 1, 4) == (4 << 20) / 4 - 1);
  REQUIRE(segment_elements((4 << 20) / 4, 4) == (256 << 10) / 4);  // 65536 floats
  REQUIRE(segment_elements(10 << 20, 8) == (256 << 10) / 8);
}

TEST_CASE("the MPI collectives choose their algorithm by size and rank count", "[comm][mpi]") {
  using A = AllReduceAlgorithm;
  REQUIRE(choose_all_reduce(1 << 30, 1) == A::local);
  REQUIRE(choose_all_reduce(8, 2) == A::exchange);
  REQUIRE(choose_all_reduce(64 << 10, 2) == A::exchange);          // each rank sends 64 KiB
  REQUIRE(choose_all_reduce((64 << 10) + 4, 2) == A::ring);  // two ranks: the ring's halves beat one whole exchange
  REQUIRE(choose_all_reduce(128 << 10, 2) == A::ring);
  REQUIRE(choose_all_reduce(32 << 10, 4) == A::recursive_doubling);  // 3 x 32 KiB to send
  REQUIRE(choose_all_reduce(40 << 10, 3) == A::ring);                // not a power of two
  REQUIRE(choose_all_reduce(128 << 10, 4) == A::recursive_doubling);
  REQUIRE(choose_all_reduce((128 << 10) + 4, 4) == A::ring);
  REQUIRE(choose_all_reduce(1 << 20, 8) == A::ring);

  using S = ScatterGatherAlgorithm;
  REQUIRE(choose_scatter_gather(8, 1) == S::local);
  REQUIRE(choose_scatter_gather(1 << 30, 2) == S::direct);
  REQUIRE(choose_scatter_gather(1 << 30, 4) == S::direct);
  REQUIRE(choose_scatter_gather(1 << 20, 8) == S::direct);
  REQUIRE(choose_scatter_gather((1 << 20) + 1, 8) == S::ring);

  using B = BroadcastAlgorithm;
  REQUIRE(choose_broadcast(1 << 30, 1) == B::local);
  REQUIRE(choose_broadcast(1 << 30, 2) == B::binomial);
  REQUIRE(choose_broadcast((512 << 10) - 1, 4) == B::binomial);
  REQUIRE(choose_broadcast(512 << 10, 3) == B::scatter_all_gather);
}
