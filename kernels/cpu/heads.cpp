// split_heads / merge_heads on the CPU: one row of hs elements at a time, copied as bytes, with
// the (group, sequence, head) triples spread over threads.
#include <cstring>

#include "kernels/cpu/training.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels::cpu {

void permute_heads(const Tensor& x, const Tensor& heads, std::int64_t num_heads, bool to_heads) {
  const std::int64_t groups = heads.size(0), batch = heads.size(1), steps = heads.size(3), head_size = heads.size(4);
  const std::int64_t row_bytes = head_size * static_cast<std::int64_t>(dtype_size(x.dtype()));
  const std::int64_t width_bytes = groups * num_heads * row_bytes;  // one step of x
  auto* x_bytes = static_cast<unsigned char*>(x.raw_data());
  auto* heads_bytes = static_cast<unsigned char*>(heads.raw_data());
  const std::int64_t triples = groups * batch * num_heads;
#pragma omp parallel for schedule(static) if (x.numel() > (1 << 16))
  for (std::int64_t triple = 0; triple < triples; ++triple) {
    const std::int64_t h = triple % num_heads, b = (triple / num_heads) % batch, k = triple / (num_heads * batch);
    unsigned char* head = heads_bytes + triple * steps * row_bytes;
    unsigned char* column = x_bytes + b * steps * width_bytes + (k * num_heads + h) * row_bytes;
    for (std::int64_t t = 0; t < steps; ++t) {
      unsigned char* row = column + t * width_bytes;
      if (to_heads) std::memcpy(head + t * row_bytes, row, static_cast<std::size_t>(row_bytes));
      else std::memcpy(row, head + t * row_bytes, static_cast<std::size_t>(row_bytes));
    }
  }
}

}  // namespace loom::kernels::cpu
