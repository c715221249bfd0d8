// Catch2 main for tests run under mpirun: every rank runs every test case; the job fails if any
// rank fails. MPI is initialized with MPI_THREAD_MULTIPLE (loom's MPI backend has progress
// threads); MPI errors return codes (checked with loom::check_mpi) instead of aborting.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdio>

#include "loom/comm/mpi.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int failures = Catch::Session().run(argc, argv);
  int failed_ranks = 0;
  const int failed_here = failures != 0 ? 1 : 0;
  MPI_Allreduce(&failed_here, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("dist tests: %d rank(s) failed\n", failed_ranks);
  if (loom::comm::mpi_calls_were_abandoned()) {
    std::fflush(stdout);
    std::_Exit(failed_ranks == 0 ? 0 : 1);  // MPI_Finalize would wait for the abandoned call
  }
  MPI_Finalize();
  return failed_ranks == 0 ? 0 : 1;
}
