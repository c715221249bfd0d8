// Catch2 main for GPU tests: runs them where a CUDA device is usable; elsewhere says why and exits
// with 77 (CTest's SKIP_RETURN_CODE) instead of pretending to pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string_view>

#include "loom/core/gpu_info.hpp"

namespace {
bool only_listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--list") || arg == "-l" || arg == "--help" || arg == "-h") return true;
  }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  if (!only_listing(argc, argv)) {
    const loom::CudaRuntimeStatus status = loom::cuda_runtime_status();
    if (!status.available()) {
      std::printf("SKIPPED: no usable CUDA device: %s\n", status.reason.c_str());
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
