// The CPU GEMM (loom's packed fp32 engine, fp32 accumulation). Arguments are validated by loom::kernels::gemm.
#pragma once

#include <cstdint>
#include <optional>

#include "loom/kernels/gemm.hpp"

namespace loom::kernels {

struct GemmShape {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
};

namespace cpu {
void gemm(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
          const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape);
}  // namespace cpu

}  // namespace loom::kernels
