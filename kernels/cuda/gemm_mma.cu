// loom's pipelined tensor-core GEMM for sm_80+ (Ampere; runs unchanged on Hopper), in the style
// CUTLASS made standard for Ampere:
// - a 128 x 128 block tile, 8 warps in 2 x 4, each warp 64 x 32 = 4 x 4 mma tiles of 16 x 8;
// - blocks are numbered in groups of 8 block rows (rasterization), so blocks running together
//   share A's rows and B's columns in L2;
// - K advances 128 bytes of input per stage (BK = 64 f16/bf16 or 32 f32 elements) through a
//   3-stage cp.async ring in shared memory, so global loads of later stages overlap the math of
//   this one; out-of-range elements are zero-filled by cp.async itself (src-size), nothing is read
//   past the operands;
// - fragments are double-buffered in registers: the next k-step's ldmatrix is issued before this
//   k-step's mma;
// - tiles keep the global layout (K- or MN-contiguous, that is the transposes) with rows padded
//   so that fragment loads are free of bank conflicts;
// - f16/bf16: ldmatrix.x4 (.trans for MN-contiguous tiles) feeding mma.sync m16n8k16;
//   tf32: 32-bit shared loads rounded with cvt.rna.tf32 (as the CPU reference rounds: to nearest,
//   ties away) feeding mma.sync m16n8k8; fp32 accumulation throughout;
// - the epilogue goes through shared memory: the accumulators are staged as an fp32 tile, then each
//   thread takes 8 consecutive columns of a row, so D, C and the pre-activation move in 16-byte
//   accesses (gemm_kernel_common.cuh, store_results);
// - split-K where the output has too few tiles to fill the GPU (weight gradients: M, N <= 3072,
//   K = B * T): each split writes its fp32 partial tile to stream-ordered scratch, and a second
//   kernel adds the splits in order and applies the epilogue, so results are deterministic.
#include <type_traits>

#include "gemm_kernel_common.cuh"
#include "kernels/cuda/device_limits.hpp"
#include "mma_common.cuh"

namespace loom::kernels::cuda {

namespace {

using gemm_detail::Epilogue;
using gemm_detail::Operand;
using gemm_detail::Output;

constexpr int block_mn = 128;  // block tile extent in M and in N
constexpr int warps_m = 2, warps_n = 4, warp_m = 64, warp_n = 32;
constexpr int threads = 32 * warps_m * warps_n;
constexpr int stages = 3;
constexpr int stage_k_bytes = 128;
constexpr int m_tiles = warp_m / 16, n_tiles = warp_n / 8;
constexpr int raster_group = 8;                     // block rows per rasterization group
constexpr int staged_pitch = block_mn + 8;          // fp32 epilogue tile row: conflict-free float2 stores
constexpr int columns_per_thread = 8;               // epilogue: one 16-byte access of 16-bit D
constexpr int max_splits = 16;
constexpr std::int64_t min_k_tiles_per_split = 8;  // each split's pipeline fills

template <class T>
constexpr int block_k = stage_k_bytes / static_cast<int>(sizeof(T));

// One operand's tile in shared memory, in its global layout: K-contiguous as [128][block_k + pad]
// or MN-contiguous as [block_k][128 + pad]. The pads spread the 8 rows one ldmatrix (16 bytes per
// row) or one tf32 fragment load (4 rows x 8 columns) touches over distinct banks: K-contiguous
// rows are 144 bytes (36 banks, 4 mod 32) apart, MN-contiguous rows 272 bytes (16-bit, 4 banks
// mod 32) or 544 bytes (f32, 8 banks mod 32).
template <class T, bool KContiguous>
struct Tile {
  static constexpr int pitch = KContiguous ? block_k<T> + 16 / static_cast<int>(sizeof(T)) : block_mn + 8;
  static constexpr int rows = KContiguous ? block_mn : block_k<T>;
  static constexpr int elements = rows * pitch;
  static_assert(elements * sizeof(T) % 16 == 0, "tiles must keep 16-byte alignment");
  __device__ static int offset(int mn, int kk) { return KContiguous ? mn * pitch + kk : kk * pitch + mn; }
};

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

// Where a block's tile sits: blocks are numbered down groups of raster_group block rows, a
// column of the group at a time, so consecutive blocks reuse the same B columns and A rows.
struct TilePlace {
  std::int64_t row0, col0;
};

__device__ __forceinline__ TilePlace rasterized_tile(std::int64_t m, std::int64_t n) {
  const int tiles_m = static_cast<int>((m + block_mn - 1) / block_mn);
  const int tiles_n = static_cast<int>((n + block_mn - 1) / block_mn);
  const int id = static_cast<int>(blockIdx.x), per_group = raster_group * tiles_n;
  const int first_row = (id / per_group) * raster_group;
  const int rows_here = min(tiles_m - first_row, raster_group);
  const int within = id % per_group;
  return TilePlace{static_cast<std::int64_t>(first_row + within % rows_here) * block_mn,
                   static_cast<std::int64_t>(within / rows_here) * block_mn};
}

// Split-K: blockIdx.z = batch * splits + split; split s covers K tiles [s * tiles_per_split, ...).
// With splits > 1 the raw fp32 sums go to partial[(split * batches + batch) * M * N + i * N + j].
struct SplitK {
  int splits;
  std::int64_t k_tiles_per_split;
  float* partial;
};

// T: input storage (float means tf32 math). A is stored M x K unless TransA (then K x M); B is
// K x N unless TransB (then N x K). Chunk: bytes per cp.async (16, or 4 for unaligned f32 rows).
template <class T, bool TransA, bool TransB, int Chunk>
__global__ void __launch_bounds__(threads) mma_pipeline_gemm_kernel(Operand a, Operand b, Output out, bool out_f32,
                                                                    Epilogue e, SplitK split_k) {
  constexpr bool a_k_contiguous = !TransA, b_k_contiguous = TransB;
  using ALayout = Tile<T, a_k_contiguous>;
  using BLayout = Tile<T, b_k_contiguous>;
  constexpr int stage_elements = ALayout::elements + BLayout::elements;
  constexpr int mma_k = sizeof(T) == 2 ? 16 : 8;
  constexpr int k_steps = block_k<T> / mma_k;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* const shared = reinterpret_cast<T*>(shared_bytes);

  const std::int64_t batch = blockIdx.z / split_k.splits, split = blockIdx.z % split_k.splits;
  const TilePlace place = rasterized_tile(out.m, out.n);
  const std::int64_t row0 = place.row0, col0 = place.col0;
  const T* a_base = static_cast<const T*>(a.data) + batch * a.batch_stride;
  const T* b_base = static_cast<const T*>(b.data) + batch * b.batch_stride;
  const int warp = threadIdx.x / 32;
  const int warp_row = (warp / warps_n) * warp_m, warp_col = (warp % warps_n) * warp_n;

  const std::int64_t all_k_tiles = (out.k + block_k<T> - 1) / block_k<T>;
  const std::int64_t first_k_tile = split * split_k.k_tiles_per_split;
  const std::int64_t k_tiles = min(all_k_tiles - first_k_tile, split_k.k_tiles_per_split);
  const std::int64_t k_limit = min(out.k, (first_k_tile + k_tiles) * block_k<T>);

  auto load_stage = [&](int stage, std::int64_t k_tile) {
    T* a_tile = shared + stage * stage_elements;
    const std::int64_t k0 = (first_k_tile + k_tile) * block_k<T>;
    load_tile<T, a_k_contiguous, Chunk>(a_tile, a_base, a.ld, row0, out.m, k0, k_limit);
    load_tile<T, b_k_contiguous, Chunk>(a_tile + ALayout::elements, b_base, b.ld, col0, out.n, k0, k_limit);
  };

  float acc[m_tiles][n_tiles][4] = {};
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
    unsigned a_frag[2][m_tiles][4], b_frag[2][n_tiles][2];
    load_fragments<T, a_k_contiguous, b_k_contiguous>(a_tile, b_tile, warp_row, warp_col, 0, a_frag[0], b_frag[0]);
#pragma unroll
    for (int ks = 0; ks < k_steps; ++ks) {
      if (ks + 1 < k_steps) {  // the next k-step's fragments load while this one multiplies
        load_fragments<T, a_k_contiguous, b_k_contiguous>(a_tile, b_tile, warp_row, warp_col, (ks + 1) * mma_k,
                                                          a_frag[(ks + 1) % 2], b_frag[(ks + 1) % 2]);
      }
#pragma unroll
      for (int i = 0; i < m_tiles; ++i) {
#pragma unroll
        for (int j = 0; j < n_tiles; ++j) mma<T>(acc[i][j], a_frag[ks % 2][i], b_frag[ks % 2][j]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the pipeline's shared memory

  // Stage the accumulators as an fp32 tile. A 16 x 8 mma tile holds {c0, c1} at row g, columns
  // 2t and 2t + 1, and {c2, c3} at row g + 8.
  float* const staged = reinterpret_cast<float*>(shared_bytes);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < m_tiles; ++i) {
#pragma unroll
    for (int j = 0; j < n_tiles; ++j) {
      float* at = staged + (warp_row + i * 16 + g) * staged_pitch + warp_col + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(at) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(at + 8 * staged_pitch) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
  }
  __syncthreads();

  constexpr int segments_per_row = block_mn / columns_per_thread;
  for (int idx = threadIdx.x; idx < block_mn * segments_per_row; idx += threads) {
    const int r = idx / segments_per_row, c = (idx % segments_per_row) * columns_per_thread;
    const std::int64_t gi = row0 + r, gj = col0 + c;
    if (gi >= out.m || gj >= out.n) continue;
    const int count = static_cast<int>(min(static_cast<std::int64_t>(columns_per_thread), out.n - gj));
    float v[columns_per_thread];
    const float4* from = reinterpret_cast<const float4*>(staged + r * staged_pitch + c);
    const float4 lo = from[0], hi = from[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    if (split_k.splits > 1) {
      const std::int64_t batches = gridDim.z / split_k.splits;
      float* to = split_k.partial + ((split * batches + batch) * out.m + gi) * out.n + gj;
      if (count == columns_per_thread && gemm_detail::aligned_16(to)) {
        reinterpret_cast<float4*>(to)[0] = lo;
        reinterpret_cast<float4*>(to)[1] = hi;
      } else {
#pragma unroll
        for (int q = 0; q < columns_per_thread; ++q) {
          if (q < count) to[q] = v[q];
        }
      }
    } else if (out_f32) {
      gemm_detail::store_results<T, float>(out, e, batch, gi, gj, v, count);
    } else {
      gemm_detail::store_results<T, T>(out, e, batch, gi, gj, v, count);
    }
  }
}

// D from the splits' partial sums, added in split order, through the epilogue.
template <class T>
__global__ void split_k_reduce_kernel(const float* partial, int splits, std::int64_t batches, Output out, bool out_f32,
                                      Epilogue e) {
  const std::int64_t per_batch = out.m * out.n, total = batches * per_batch;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += stride) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += partial[s * total + idx];
    const std::int64_t batch = idx / per_batch, gi = (idx % per_batch) / out.n, gj = idx % out.n;
    if (out_f32) gemm_detail::store_result<T, float>(out, e, batch, gi, gj, sum);
    else gemm_detail::store_result<T, T>(out, e, batch, gi, gj, sum);
  }
}

// The pipeline's ring, or the staged fp32 epilogue tile if that is larger.
template <class T, bool TransA, bool TransB>
constexpr std::size_t shared_bytes_for() {
  const std::size_t ring = stages * (Tile<T, !TransA>::elements + Tile<T, TransB>::elements) * sizeof(T);
  const std::size_t staged = static_cast<std::size_t>(block_mn) * staged_pitch * sizeof(float);
  return ring > staged ? ring : staged;
}

struct Launch {
  Operand a, b;
  Output out;
  bool out_f32;
  Epilogue e;
  SplitK split_k;
  dim3 grid;
  cudaStream_t stream;
  int device;
};

template <class T, bool TransA, bool TransB, int Chunk>
void launch(const Launch& l) {
  auto* kernel = mma_pipeline_gemm_kernel<T, TransA, TransB, Chunk>;
  constexpr std::size_t bytes = shared_bytes_for<T, TransA, TransB>();
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), bytes, l.device, "loom's mma GEMM");
  kernel<<<l.grid, threads, bytes, l.stream>>>(l.a, l.b, l.out, l.out_f32, l.e, l.split_k);
}

template <class T>
std::size_t shared_bytes_for(bool trans_a, bool trans_b) {
  if (!trans_a && !trans_b) return shared_bytes_for<T, false, false>();
  if (!trans_a && trans_b) return shared_bytes_for<T, false, true>();
  if (trans_a && !trans_b) return shared_bytes_for<T, true, false>();
  return shared_bytes_for<T, true, true>();
}

template <class T, int Chunk>
void launch_layout(bool trans_a, bool trans_b, const Launch& l) {
  if (!trans_a && !trans_b) launch<T, false, false, Chunk>(l);
  if (!trans_a && trans_b) launch<T, false, true, Chunk>(l);
  if (trans_a && !trans_b) launch<T, true, false, Chunk>(l);
  if (trans_a && trans_b) launch<T, true, true, Chunk>(l);
}

// Splits of K for a GEMM of `tiles` output tiles: enough for about one block per SM (one is what
// fits: ~170 registers x 256 threads, 108 KiB of shared memory) when the tiles alone do not fill
// the GPU, with at least min_k_tiles_per_split K tiles in each.
SplitK choose_split_k(std::int64_t tiles, std::int64_t batch, std::int64_t k_tiles, int sms) {
  SplitK plan{1, k_tiles, nullptr};
  if (tiles >= sms || k_tiles < 2 * min_k_tiles_per_split) return plan;
  const std::int64_t wanted = std::min<std::int64_t>({(sms + tiles - 1) / tiles, k_tiles / min_k_tiles_per_split,
                                                      max_splits, 65535 / batch});
  if (wanted < 2) return plan;
  plan.k_tiles_per_split = (k_tiles + wanted - 1) / wanted;
  plan.splits = static_cast<int>((k_tiles + plan.k_tiles_per_split - 1) / plan.k_tiles_per_split);
  return plan;
}

template <class T, int Chunk>
void run(bool trans_a, bool trans_b, Launch l) {
  const std::int64_t tiles_m = (l.out.m + block_mn - 1) / block_mn, tiles_n = (l.out.n + block_mn - 1) / block_mn;
  const std::int64_t batch = l.grid.z;
  const std::int64_t k_tiles = (l.out.k + block_k<T> - 1) / block_k<T>;
  l.split_k = choose_split_k(tiles_m * tiles_n * batch, batch, k_tiles, device_limits(l.device).multiprocessors);
  if (l.split_k.splits == 1) {
    launch_layout<T, Chunk>(trans_a, trans_b, l);
    check_launch("loom mma.sync GEMM");
    return;
  }
  const std::int64_t total = batch * l.out.m * l.out.n;
  const StreamScratch partial(static_cast<std::size_t>(l.split_k.splits * total) * sizeof(float), l.stream);
  l.split_k.partial = partial.as<float>();
  l.grid.z = static_cast<unsigned>(batch * l.split_k.splits);
  launch_layout<T, Chunk>(trans_a, trans_b, l);
  check_launch("loom mma.sync GEMM (split-K)");
  constexpr int reduce_threads = 256;
  split_k_reduce_kernel<T><<<grid_for(total, reduce_threads), reduce_threads, 0, l.stream>>>(
      l.split_k.partial, l.split_k.splits, batch, l.out, l.out_f32, l.e);
  check_launch("loom mma.sync GEMM split-K reduction");
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
  const std::int64_t tiles = ((shape.m + block_mn - 1) / block_mn) * ((shape.n + block_mn - 1) / block_mn);
  require(tiles <= INT32_MAX, "gemm (loom backend): ", shape.m, " x ", shape.n, " needs ", tiles, " tiles of ",
          block_mn, " x ", block_mn, ", more than a grid holds");
  if (shape.m > 0 && shape.n > 0) {
    const DeviceGuard guard(d.tensor.device());
    const int device = d.tensor.device().index();
    const std::size_t optin = device_limits(device).shared_memory_optin;
    const bool tf32 = options.precision == GemmPrecision::tf32;
    const std::size_t needed = tf32 ? shared_bytes_for<float>(options.trans_a, options.trans_b)
                                    : shared_bytes_for<__half>(options.trans_a, options.trans_b);
    const bool fits = needed <= optin;
    require(fits || !tf32, "gemm (loom backend): the tf32 kernel needs ", needed,
            " bytes of shared memory per block, more than this GPU offers (", optin, "); use GemmBackend::cublaslt");
    const bool aligned = rows_16_byte_aligned(a) && rows_16_byte_aligned(b);
    if (fits && (tf32 || aligned)) {
      const Launch l{gemm_detail::operand_of(a),
                     gemm_detail::operand_of(b),
                     gemm_detail::output_of(d, shape),
                     d.tensor.dtype() == DType::f32,
                     gemm_detail::epilogue_of(c, options),
                     SplitK{1, 0, nullptr},
                     dim3(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(shape.batch)),
                     as_stream(stream),
                     device};
      const bool ta = options.trans_a, tb = options.trans_b;
      if (options.precision == GemmPrecision::tf32) {
        if (aligned) run<float, 16>(ta, tb, l);
        else run<float, 4>(ta, tb, l);
      } else if (options.precision == GemmPrecision::bf16) {
        run<__nv_bfloat16, 16>(ta, tb, l);
      } else {
        run<__half, 16>(ta, tb, l);
      }
    } else {
      gemm_wmma(a, b, c, d, options, shape, stream);
    }
  }
  if (options.epilogue.bias_grad.defined()) gemm_bias_grad(a, options.trans_a, shape, options.epilogue.bias_grad, stream);
}

}  // namespace loom::kernels::cuda
