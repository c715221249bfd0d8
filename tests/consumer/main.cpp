// Uses loom the way an application does (installed, or built with add_subdirectory), then prints
// loom-consumer-ok.
#include <loom/kernels/cpu_isa.hpp>
#include <loom/kernels/gemm.hpp>
#include <loom/loom.hpp>

#if LOOM_CONSUMER_CALLS_CUDA
#include <loom/core/cuda_check.hpp>  // the CUDA runtime's headers come with the cuda component
#endif

#include <cstdio>
#include <string>
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
  // A CPU kernel through the run-time dispatch: [1 2; 3 4]^2 = [7 10; 15 22].
  const loom::Tensor square = loom::Tensor::empty({2, 2}, loom::DType::f32);
  loom::kernels::gemm(t, t, square);
  if (square.to_vector<float>() != std::vector<float>{7.0f, 10.0f, 15.0f, 22.0f}) return 1;
#if LOOM_CONSUMER_CALLS_CUDA
  loom::check(cudaSuccess, "nothing");
#endif
  std::printf("CPU kernels: %s\n", std::string(to_string(loom::kernels::active_cpu_isa())).c_str());
  std::printf("%s\n", loom::to_string(loom::build_info()).c_str());
  std::printf("loom-consumer-ok\n");
  return 0;
}
