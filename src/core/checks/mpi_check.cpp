#include "loom/core/mpi_check.hpp"

#include <mpi.h>

#include <string>

#include "loom/core/error.hpp"

namespace loom {

namespace {
// MPI's own words for an error code. Open MPI 4 aborts the process if MPI_Error_string is called
// outside [MPI_Init, MPI_Finalize], so ask only inside that window.
std::string describe(int status) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return "no description: MPI is not initialized";
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) return "no description";
  int error_class = status;
  MPI_Error_class(status, &error_class);
  return "class " + std::to_string(error_class) + ": " + std::string(text, static_cast<std::size_t>(length));
}
}  // namespace

void check_mpi(int status, std::string_view call) {
  if (status == MPI_SUCCESS) return;
  fail(ErrorCategory::mpi, call, " failed: MPI error ", status, " (", describe(status), ")");
}

}  // namespace loom
