// Uses the installed loom the way an application does, then prints loom-consumer-ok.
#include <loom/loom.hpp>

#if LOOM_WITH_CUDA
#include <loom/core/cuda_check.hpp>  // vendor include paths come along with loom::loom
#endif

#include <cstdio>
#include <vector>

int main() {
  const loom::Tensor t = loom::Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  const loom::Tensor row = t.select(1);
  if (row.to_vector<float>() != std::vector<float>{3.0f, 4.0f}) return 1;
  if (loom::to_float(loom::to_half(0.5f)) != 0.5f) return 1;
  try {
    (void)loom::parse_dtype("fp4");
    return 1;
  } catch (const loom::Error& error) {
    if (error.category() != loom::ErrorCategory::invalid_argument) return 1;
  }
#if LOOM_WITH_CUDA
  loom::check(cudaSuccess, "nothing");
#endif
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("loom-consumer-ok\n");
  return 0;
}
