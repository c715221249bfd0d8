// What this build of loom was built with, for logs and bug reports.
#pragma once

#include <string>

namespace loom {

struct BuildInfo {
  std::string version;
  bool cuda = false;
  std::string cuda_toolkit_version;  // empty without CUDA
  std::string cuda_architectures;    // e.g. "80;90"
  bool nccl = false;
  std::string nccl_version;
  bool cudnn = false;
  std::string cudnn_version;
  bool mpi = false;
  std::string mpi_version;
};

BuildInfo build_info();
std::string to_string(const BuildInfo& info);  // one line: "loom 0.1.0 (CUDA 13.0 sm 80;90, ...)"

}  // namespace loom
