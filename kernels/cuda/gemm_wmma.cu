// loom's general tensor-core GEMM: WMMA 16x16x16 fragments (HMMA on sm_80+) for f16 and bf16
// inputs with fp32 accumulation, for any leading dimension and alignment (the pipelined kernel in
// gemm_mma.cu needs 16-byte aligned rows; gemm_loom sends everything else here). A 128x128 block tile with a K step of 32 is staged in
// shared memory (any transposes are resolved while staging, out-of-range elements are zero);
// 8 warps each own a 64x32 sub-tile (4x2 fragments). The epilogue goes fragment by fragment
// through a per-warp 16x16 fp32 scratch: alpha, beta*C, bias, GELU with the pre-activation kept.
// Single-stage and element-wise staging: correct for every layout, not fast.
#include <mma.h>

#include "gemm_kernel_common.cuh"
#include "kernels/cuda/grid_split.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int block_m = 128, block_n = 128, block_k = 32;
constexpr int a_ld = block_k + 8;  // padded leading dimensions: multiples of 8 halves, fewer bank conflicts
constexpr int b_ld = block_n + 8;
constexpr int warps_m = 2, warps_n = 4, warp_m = 64, warp_n = 32;  // 2 x 4 warps of 64 x 32
constexpr int threads = 32 * warps_m * warps_n;

using gemm_detail::Epilogue;
using gemm_detail::Operand;
using gemm_detail::Output;

template <class T, class Out>
__global__ void __launch_bounds__(threads) wmma_gemm_kernel(Operand a, Operand b, Output out, bool trans_a,
                                                             bool trans_b, Epilogue e, std::int64_t first_row_tile) {
  using namespace nvcuda;
  __shared__ __align__(32) T a_tile[block_m * a_ld];
  __shared__ __align__(32) T b_tile[block_k * b_ld];
  __shared__ __align__(32) float scratch[threads / 32][16 * 16];

  const std::int64_t m = out.m, n = out.n, k = out.k;
  const std::int64_t batch = blockIdx.z;
  const std::int64_t row0 = (first_row_tile + blockIdx.y) * block_m;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * block_n;
  const T* a_base = static_cast<const T*>(a.data) + batch * a.batch_stride;
  const T* b_base = static_cast<const T*>(b.data) + batch * b.batch_stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row = (warp / warps_n) * warp_m, warp_col = (warp % warps_n) * warp_n;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[warp_m / 16][warp_n / 16];
  for (auto& row : acc) {
    for (auto& fragment : row) wmma::fill_fragment(fragment, 0.0f);
  }

  for (std::int64_t k0 = 0; k0 < k; k0 += block_k) {
    // Stage op(A)[row0.., k0..] as block_m x block_k and op(B)[k0.., col0..] as block_k x block_n.
    for (int idx = threadIdx.x; idx < block_m * block_k; idx += threads) {
      const int r = idx / block_k, c = idx % block_k;
      const std::int64_t gi = row0 + r, gk = k0 + c;
      T value = from_f32<T>(0.0f);
      if (gi < m && gk < k) value = trans_a ? a_base[gk * a.ld + gi] : a_base[gi * a.ld + gk];
      a_tile[r * a_ld + c] = value;
    }
    for (int idx = threadIdx.x; idx < block_k * block_n; idx += threads) {
      const int r = idx / block_n, c = idx % block_n;
      const std::int64_t gk = k0 + r, gj = col0 + c;
      T value = from_f32<T>(0.0f);
      if (gk < k && gj < n) value = trans_b ? b_base[gj * b.ld + gk] : b_base[gk * b.ld + gj];
      b_tile[r * b_ld + c] = value;
    }
    __syncthreads();
    for (int kk = 0; kk < block_k; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a_fragment[warp_m / 16];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b_fragment[warp_n / 16];
      for (int i = 0; i < warp_m / 16; ++i) wmma::load_matrix_sync(a_fragment[i], a_tile + (warp_row + i * 16) * a_ld + kk, a_ld);
      for (int j = 0; j < warp_n / 16; ++j) wmma::load_matrix_sync(b_fragment[j], b_tile + kk * b_ld + warp_col + j * 16, b_ld);
      for (int i = 0; i < warp_m / 16; ++i) {
        for (int j = 0; j < warp_n / 16; ++j) wmma::mma_sync(acc[i][j], a_fragment[i], b_fragment[j], acc[i][j]);
      }
    }
    __syncthreads();  // the tiles are overwritten by the next step
  }

  float* mine = scratch[warp];
  for (int i = 0; i < warp_m / 16; ++i) {
    for (int j = 0; j < warp_n / 16; ++j) {
      wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int idx = lane; idx < 256; idx += 32) {
        const std::int64_t gi = row0 + warp_row + i * 16 + idx / 16, gj = col0 + warp_col + j * 16 + idx % 16;
        if (gi < m && gj < n) gemm_detail::store_result<T, Out>(out, e, batch, gi, gj, mine[idx]);
      }
      __syncwarp();  // mine is reused by the next fragment
    }
  }
}

}  // namespace

void gemm_wmma(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
               const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream) {
  const DeviceGuard guard(d.tensor.device());
  const Epilogue e = gemm_detail::epilogue_of(c, options);
  const Operand oa = gemm_detail::operand_of(a), ob = gemm_detail::operand_of(b);
  const Output out = gemm_detail::output_of(d, shape);
  require(shape.batch <= 65535, "gemm (WMMA kernel): batch ", shape.batch, " exceeds 65535");
  // Row tiles along y, which holds at most 65535 blocks: a taller D (M > 8,388,480) in several launches.
  const std::vector<GridPart> parts = split_grid((shape.m + block_m - 1) / block_m);
  const auto column_tiles = static_cast<unsigned>((shape.n + block_n - 1) / block_n);
  auto launch = [&]<class T>() {
    auto run = [&]<class Out>() {
      for (const GridPart& part : parts) {
        const dim3 grid(column_tiles, static_cast<unsigned>(part.count), static_cast<unsigned>(shape.batch));
        wmma_gemm_kernel<T, Out><<<grid, threads, 0, as_stream(stream)>>>(oa, ob, out, options.trans_a,
                                                                          options.trans_b, e, part.first);
      }
    };
    if (d.tensor.dtype() == DType::f32) run.template operator()<float>();
    else run.template operator()<T>();  // D is f32 or the input dtype (validated)
  };
  if (a.tensor.dtype() == DType::bf16) launch.template operator()<__nv_bfloat16>();
  else launch.template operator()<__half>();
  check_launch("loom WMMA gemm");
}

}  // namespace loom::kernels::cuda
