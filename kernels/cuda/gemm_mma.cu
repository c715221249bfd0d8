// loom's pipelined tensor-core GEMM for sm_80+ (Ampere; runs unchanged on Hopper), in the style
// CUTLASS made standard for Ampere:
// - a 128 x 128 block tile, 8 warps in 2 x 4, each warp 64 x 32 = 4 x 4 mma tiles of 16 x 8;
// - K advances 64 bytes of input per stage (32 f16/bf16 or 16 f32 elements) through a 4-stage
//   cp.async ring in shared memory, so global loads of later stages overlap the math of this one;
//   out-of-range elements are zero-filled by cp.async itself (src-size), nothing is read past
//   the operands;
// - tiles keep the global layout (K- or MN-contiguous, that is the transposes) with rows padded
//   so that fragment loads are free of bank conflicts;
// - f16/bf16: ldmatrix.x4 (.trans for MN-contiguous tiles) feeding mma.sync m16n8k16;
//   tf32: 32-bit shared loads rounded with cvt.rna.tf32 (as the CPU reference rounds: to nearest,
//   ties away) feeding mma.sync m16n8k8; fp32 accumulation throughout;
// - the epilogue runs straight from the accumulator registers (gemm_kernel_common.cuh).
#include <type_traits>

#include "gemm_kernel_common.cuh"

namespace loom::kernels::cuda {

namespace {

using gemm_detail::Epilogue;
using gemm_detail::Operand;
using gemm_detail::Output;

constexpr int block_mn = 128;  // block tile extent in M and in N
constexpr int warps_m = 2, warps_n = 4, warp_m = 64, warp_n = 32;
constexpr int threads = 32 * warps_m * warps_n;
constexpr int stages = 4;
constexpr int stage_k_bytes = 64;
constexpr int m_tiles = warp_m / 16, n_tiles = warp_n / 8;

template <class T>
constexpr int block_k = stage_k_bytes / static_cast<int>(sizeof(T));

// One operand's tile in shared memory, in its global layout: K-contiguous as [128][block_k + pad]
// or MN-contiguous as [block_k][128 + pad]. The pads spread the 8 rows one ldmatrix (16 bytes per
// row) or one tf32 fragment load (4 rows x 8 columns) touches over distinct banks: K-contiguous
// rows are 80 bytes (20 banks) apart, MN-contiguous rows 272 bytes (16-bit, 4 banks mod 32) or
// 544 bytes (f32, 8 banks mod 32).
template <class T, bool KContiguous>
struct Tile {
  static constexpr int pitch = KContiguous ? block_k<T> + 16 / static_cast<int>(sizeof(T)) : block_mn + 8;
  static constexpr int rows = KContiguous ? block_mn : block_k<T>;
  static constexpr int elements = rows * pitch;
  static_assert(elements * sizeof(T) % 16 == 0, "tiles must keep 16-byte alignment");
  __device__ static int offset(int mn, int kk) { return KContiguous ? mn * pitch + kk : kk * pitch + mn; }
};

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Copies `bytes` (<= Chunk) from global memory and zero-fills the rest of the Chunk-byte slot.
template <int Chunk>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, int bytes) {
  if constexpr (Chunk == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(smem)), "l"(gmem), "r"(bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_address(smem)), "l"(gmem),
                 "n"(Chunk), "r"(bytes)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Stages op(X)[mn0.., k0..] (block_mn x block_k) of an operand stored K-contiguous (X[mn * ld + k])
// or MN-contiguous (X[k * ld + mn]); elements outside mn_limit x k_limit become zero.
template <class T, bool KContiguous, int Chunk>
__device__ __forceinline__ void load_tile(T* tile, const T* base, std::int64_t ld, std::int64_t mn0,
                                          std::int64_t mn_limit, std::int64_t k0, std::int64_t k_limit) {
  using Layout = Tile<T, KContiguous>;
  constexpr int per_chunk = Chunk / static_cast<int>(sizeof(T));
  constexpr int row_length = KContiguous ? block_k<T> : block_mn;  // along the contiguous direction
  constexpr int chunks_per_row = row_length / per_chunk;
  for (int idx = threadIdx.x; idx < Layout::rows * chunks_per_row; idx += threads) {
    const int row = idx / chunks_per_row, col = (idx % chunks_per_row) * per_chunk;
    const std::int64_t outer = (KContiguous ? mn0 : k0) + row, inner = (KContiguous ? k0 : mn0) + col;
    const std::int64_t outer_limit = KContiguous ? mn_limit : k_limit, inner_limit = KContiguous ? k_limit : mn_limit;
    const std::int64_t remaining = inner_limit - inner;
    const std::int64_t valid = outer < outer_limit ? (remaining < per_chunk ? remaining : per_chunk) : 0;
    const T* src = valid > 0 ? base + outer * ld + inner : base;
    cp_async<Chunk>(tile + row * Layout::pitch + col, src, valid > 0 ? static_cast<int>(valid * sizeof(T)) : 0);
  }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// acc += a b for one 16 x 8 tile.
template <class T>
__device__ __forceinline__ void mma(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Fragments of one mma k-step: A for the warp's 4 row tiles, B for its 4 column tiles. The register
// layouts are those of the PTX ISA for mma.m16n8k16 (16-bit) and mma.m16n8k8 (tf32), with
// g = lane / 4 and t = lane % 4.
template <class T, bool AKContiguous, bool BKContiguous>
__device__ __forceinline__ void load_fragments(const T* a_tile, const T* b_tile, int warp_row, int warp_col, int kk,
                                               unsigned (&a)[m_tiles][4], unsigned (&b)[n_tiles][2]) {
  using ALayout = Tile<T, AKContiguous>;
  using BLayout = Tile<T, BKContiguous>;
  const int lane = threadIdx.x % 32;
  if constexpr (sizeof(T) == 2) {
    // x4 matrix j = lane / 8 takes its row address from lane % 8.
    const int j = lane / 8, r = lane % 8;
#pragma unroll
    for (int i = 0; i < m_tiles; ++i) {
      const int m = warp_row + i * 16 + (j & 1) * 8, k = kk + (j >> 1) * 8;  // matrices (m0,k0) (m8,k0) (m0,k8) (m8,k8)
      if constexpr (AKContiguous) ldmatrix_x4(a[i], a_tile + ALayout::offset(m + r, k));
      else ldmatrix_x4_trans(a[i], a_tile + ALayout::offset(m, k + r));
    }
#pragma unroll
    for (int p = 0; p < n_tiles / 2; ++p) {
      const int n = warp_col + p * 16 + (j >> 1) * 8, k = kk + (j & 1) * 8;  // matrices (n0,k0) (n0,k8) (n8,k0) (n8,k8)
      unsigned r4[4];
      if constexpr (BKContiguous) ldmatrix_x4(r4, b_tile + BLayout::offset(n + r, k));
      else ldmatrix_x4_trans(r4, b_tile + BLayout::offset(n, k + r));
      b[2 * p][0] = r4[0];
      b[2 * p][1] = r4[1];
      b[2 * p + 1][0] = r4[2];
      b[2 * p + 1][1] = r4[3];
    }
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < m_tiles; ++i) {
      const int m = warp_row + i * 16 + g;
      a[i][0] = to_tf32(a_tile[ALayout::offset(m, kk + t)]);
      a[i][1] = to_tf32(a_tile[ALayout::offset(m + 8, kk + t)]);
      a[i][2] = to_tf32(a_tile[ALayout::offset(m, kk + t + 4)]);
      a[i][3] = to_tf32(a_tile[ALayout::offset(m + 8, kk + t + 4)]);
    }
#pragma unroll
    for (int jn = 0; jn < n_tiles; ++jn) {
      const int n = warp_col + jn * 8 + g;
      b[jn][0] = to_tf32(b_tile[BLayout::offset(n, kk + t)]);
      b[jn][1] = to_tf32(b_tile[BLayout::offset(n, kk + t + 4)]);
    }
  }
}

// T: input storage (float means tf32 math). A is stored M x K unless TransA (then K x M); B is
// K x N unless TransB (then N x K). Chunk: bytes per cp.async (16, or 4 for unaligned f32 rows).
template <class T, bool TransA, bool TransB, int Chunk>
__global__ void __launch_bounds__(threads) mma_pipeline_gemm_kernel(Operand a, Operand b, Output out, bool out_f32,
                                                                    Epilogue e) {
  constexpr bool a_k_contiguous = !TransA, b_k_contiguous = TransB;
  using ALayout = Tile<T, a_k_contiguous>;
  using BLayout = Tile<T, b_k_contiguous>;
  constexpr int stage_elements = ALayout::elements + BLayout::elements;
  constexpr int mma_k = sizeof(T) == 2 ? 16 : 8;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* const shared = reinterpret_cast<T*>(shared_bytes);

  const std::int64_t batch = blockIdx.z;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * block_mn;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * block_mn;
  const T* a_base = static_cast<const T*>(a.data) + batch * a.batch_stride;
  const T* b_base = static_cast<const T*>(b.data) + batch * b.batch_stride;
  const int warp = threadIdx.x / 32;
  const int warp_row = (warp / warps_n) * warp_m, warp_col = (warp % warps_n) * warp_n;

  auto load_stage = [&](int stage, std::int64_t k_tile) {
    T* a_tile = shared + stage * stage_elements;
    const std::int64_t k0 = k_tile * block_k<T>;
    load_tile<T, a_k_contiguous, Chunk>(a_tile, a_base, a.ld, row0, out.m, k0, out.k);
    load_tile<T, b_k_contiguous, Chunk>(a_tile + ALayout::elements, b_base, b.ld, col0, out.n, k0, out.k);
  };

  float acc[m_tiles][n_tiles][4] = {};
  const std::int64_t k_tiles = (out.k + block_k<T> - 1) / block_k<T>;
  for (int s = 0; s < stages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();  // empty groups keep the count uniform
  }
  for (std::int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<stages - 2>();  // this thread's copies of stage kt have landed ...
    __syncthreads();              // ... everyone's, and everyone is done with stage kt - 1
    const std::int64_t next = kt + stages - 1;
    if (next < k_tiles) load_stage(static_cast<int>(next % stages), next);
    cp_async_commit();
    const T* a_tile = shared + (kt % stages) * stage_elements;
    const T* b_tile = a_tile + ALayout::elements;
#pragma unroll
    for (int kk = 0; kk < block_k<T>; kk += mma_k) {
      unsigned a_frag[m_tiles][4], b_frag[n_tiles][2];
      load_fragments<T, a_k_contiguous, b_k_contiguous>(a_tile, b_tile, warp_row, warp_col, kk, a_frag, b_frag);
#pragma unroll
      for (int i = 0; i < m_tiles; ++i) {
#pragma unroll
        for (int j = 0; j < n_tiles; ++j) mma<T>(acc[i][j], a_frag[i], b_frag[j]);
      }
    }
  }
  cp_async_wait<0>();

  // Accumulator layout of a 16 x 8 tile: {c0, c1} at row g, columns 2t and 2t + 1; {c2, c3} at row g + 8.
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < m_tiles; ++i) {
#pragma unroll
    for (int j = 0; j < n_tiles; ++j) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const std::int64_t gi = row0 + warp_row + i * 16 + g + (v / 2) * 8;
        const std::int64_t gj = col0 + warp_col + j * 8 + 2 * t + v % 2;
        if (gi >= out.m || gj >= out.n) continue;
        if (out_f32) gemm_detail::store_result<T, float>(out, e, batch, gi, gj, acc[i][j][v]);
        else gemm_detail::store_result<T, T>(out, e, batch, gi, gj, acc[i][j][v]);
      }
    }
  }
}

template <class T, bool TransA, bool TransB>
constexpr std::size_t shared_bytes_for() {
  return stages * (Tile<T, !TransA>::elements + Tile<T, TransB>::elements) * sizeof(T);
}

template <class T, bool TransA, bool TransB, int Chunk>
void launch(const Operand& a, const Operand& b, const Output& out, bool out_f32, const Epilogue& e, dim3 grid,
            cudaStream_t stream) {
  auto* kernel = mma_pipeline_gemm_kernel<T, TransA, TransB, Chunk>;
  constexpr std::size_t bytes = shared_bytes_for<T, TransA, TransB>();
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute(max dynamic shared memory) for loom's mma GEMM");
  kernel<<<grid, threads, bytes, stream>>>(a, b, out, out_f32, e);
}

template <class T, int Chunk>
void launch_layout(bool trans_a, bool trans_b, const Operand& a, const Operand& b, const Output& out, bool out_f32,
                   const Epilogue& e, dim3 grid, cudaStream_t stream) {
  if (!trans_a && !trans_b) launch<T, false, false, Chunk>(a, b, out, out_f32, e, grid, stream);
  if (!trans_a && trans_b) launch<T, false, true, Chunk>(a, b, out, out_f32, e, grid, stream);
  if (trans_a && !trans_b) launch<T, true, false, Chunk>(a, b, out, out_f32, e, grid, stream);
  if (trans_a && trans_b) launch<T, true, true, Chunk>(a, b, out, out_f32, e, grid, stream);
}

// cp.async of 16 bytes needs every row (and batch) of the operand to start 16-byte aligned.
bool rows_16_byte_aligned(const StridedMatrix& m) {
  const std::size_t element = dtype_size(m.tensor.dtype());
  const auto address = reinterpret_cast<std::uintptr_t>(m.tensor.raw_data());
  const std::int64_t stride = gemm_detail::stride_of(m);
  return address % 16 == 0 && (static_cast<std::size_t>(m.ld) * element) % 16 == 0 &&
         (static_cast<std::size_t>(stride) * element) % 16 == 0;
}

}  // namespace

void gemm_loom(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
               const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream) {
  require(options.precision != GemmPrecision::fp32, "gemm (loom backend): fp32 precision has no tensor-core kernel");
  require(shape.batch <= 65535, "gemm (loom backend): batch ", shape.batch, " exceeds 65535");
  require((shape.m + block_mn - 1) / block_mn <= 65535, "gemm (loom backend): M = ", shape.m,
          " needs more than 65535 row blocks of ", block_mn);
  if (shape.m > 0 && shape.n > 0) {
    const bool aligned = rows_16_byte_aligned(a) && rows_16_byte_aligned(b);
    if (options.precision == GemmPrecision::tf32 || aligned) {
      const DeviceGuard guard(d.tensor.device());
      const Operand oa = gemm_detail::operand_of(a), ob = gemm_detail::operand_of(b);
      const Output out = gemm_detail::output_of(d, shape);
      const Epilogue e = gemm_detail::epilogue_of(c, options);
      const bool out_f32 = d.tensor.dtype() == DType::f32;
      const dim3 grid(static_cast<unsigned>((shape.n + block_mn - 1) / block_mn),
                      static_cast<unsigned>((shape.m + block_mn - 1) / block_mn), static_cast<unsigned>(shape.batch));
      const cudaStream_t s = as_stream(stream);
      const bool ta = options.trans_a, tb = options.trans_b;
      if (options.precision == GemmPrecision::tf32) {
        if (aligned) launch_layout<float, 16>(ta, tb, oa, ob, out, out_f32, e, grid, s);
        else launch_layout<float, 4>(ta, tb, oa, ob, out, out_f32, e, grid, s);
      } else if (options.precision == GemmPrecision::bf16) {
        launch_layout<__nv_bfloat16, 16>(ta, tb, oa, ob, out, out_f32, e, grid, s);
      } else {
        launch_layout<__half, 16>(ta, tb, oa, ob, out, out_f32, e, grid, s);
      }
      check_launch("loom mma.sync GEMM");
    } else {
      gemm_wmma(a, b, c, d, options, shape, stream);
    }
  }
  if (options.epilogue.bias_grad.defined()) gemm_bias_grad(a, options.trans_a, shape, options.epilogue.bias_grad, stream);
}

}  // namespace loom::kernels::cuda
