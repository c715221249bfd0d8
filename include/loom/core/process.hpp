// What the launcher (mpirun, srun, torchrun) told this process about itself.
#pragma once

#include <optional>

namespace loom {

// This process's global rank from the launcher's environment, read in order:
// OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID, RANK. Empty when none is set
// (or the value is not a non-negative integer).
std::optional<int> launcher_rank() noexcept;

}  // namespace loom
