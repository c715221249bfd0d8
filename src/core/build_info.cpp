#include "loom/core/build_info.hpp"

#include "loom/config.hpp"

namespace loom {

BuildInfo build_info() {
  BuildInfo info;
  info.version = LOOM_VERSION_STRING;
  info.cuda = LOOM_WITH_CUDA;
  info.nccl = LOOM_WITH_NCCL;
  info.cudnn = LOOM_WITH_CUDNN;
  info.mpi = LOOM_WITH_MPI;
  if (info.cuda) {
    info.cuda_toolkit_version = LOOM_CUDA_TOOLKIT_VERSION;
    info.cuda_architectures = LOOM_CUDA_ARCHITECTURES;
  }
  if (info.nccl) info.nccl_version = LOOM_NCCL_VERSION;
  if (info.cudnn) info.cudnn_version = LOOM_CUDNN_VERSION;
  if (info.mpi) info.mpi_version = LOOM_MPI_VERSION;
  return info;
}

std::string to_string(const BuildInfo& info) {
  auto part = [](bool on, const std::string& name, const std::string& version) {
    return on ? name + " " + version : name + " off";
  };
  std::string cuda = part(info.cuda, "CUDA", info.cuda_toolkit_version);
  if (info.cuda) cuda += " (sm " + info.cuda_architectures + ")";
  return "loom " + info.version + " (" + cuda + ", " + part(info.nccl, "NCCL", info.nccl_version) + ", " +
         part(info.cudnn, "cuDNN", info.cudnn_version) + ", " + part(info.mpi, "MPI", info.mpi_version) + ")";
}

}  // namespace loom
