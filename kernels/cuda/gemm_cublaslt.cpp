// The cuBLASLt GEMM path. Row-major operands are column-major transposes of themselves, so
// D = op(A) op(B) is issued as D^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" is our A.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/training.hpp"
#include "loom/core/cuda_device_guard.hpp"
#include "loom/core/cuda_check.hpp"
#include "loom/core/device_calls.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr std::size_t workspace_bytes = std::size_t{32} << 20;  // what cuBLASLt suggests for Hopper
constexpr std::uint32_t bias_alignment = 16;                       // what its bias epilogue needs

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: fail(ErrorCategory::invalid_argument, "cuBLASLt GEMM: unsupported dtype ", dtype);
  }
}

// RAII owners of the cuBLASLt objects one GEMM call needs.
struct Handle {
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cublasLtHandle_t value = nullptr;
  Handle() {
    check(cublasLtCreate(&value), "cublasLtCreate");
    loom::detail::count_device_call(loom::detail::DeviceCall::blas_handle);
  }
  ~Handle() { cublasLtDestroy(value); }
};
struct MatmulDesc {
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  cublasLtMatmulDesc_t value = nullptr;
  MatmulDesc(cublasComputeType_t compute) {
    check(cublasLtMatmulDescCreate(&value, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(value); }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& v) {
    check(cublasLtMatmulDescSetAttribute(value, attribute, &v, sizeof(v)), "cublasLtMatmulDescSetAttribute");
  }
};
struct Layout {
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  cublasLtMatrixLayout_t value = nullptr;
  // A column-major rows x cols matrix with leading dimension ld, batched.
  Layout(DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t batch, std::int64_t stride) {
    check(cublasLtMatrixLayoutCreate(&value, cuda_type(dtype), static_cast<std::uint64_t>(rows),
                                     static_cast<std::uint64_t>(cols), ld),
          "cublasLtMatrixLayoutCreate");
    const auto count = static_cast<std::int32_t>(batch);
    check(cublasLtMatrixLayoutSetAttribute(value, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
          "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    check(cublasLtMatrixLayoutSetAttribute(value, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
          "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(value); }
};
struct Preference {
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  cublasLtMatmulPreference_t value = nullptr;
  Preference() { check(cublasLtMatmulPreferenceCreate(&value), "cublasLtMatmulPreferenceCreate"); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(value); }
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const T& v) {
    check(cublasLtMatmulPreferenceSetAttribute(value, attribute, &v, sizeof(v)), "cublasLtMatmulPreferenceSetAttribute");
  }
};
struct Workspace {
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data = nullptr;
  cudaStream_t stream;
  Workspace(std::size_t bytes, cudaStream_t s) : stream(s) {
    check(cudaMallocAsync(&data, bytes, s), "cudaMallocAsync(cuBLASLt workspace)");
  }
  ~Workspace() { cudaFreeAsync(data, stream); }
};

// One GEMM configuration ready to run: its descriptor (every setting but the pointers), its layouts
// and the heuristic's algorithm.
struct Plan {
  MatmulDesc desc;
  Layout a, b, c, d;
  cublasLtMatmulAlgo_t algo{};
};

// What a thread keeps per device between GEMMs: one handle, one workspace per stream (a stream's
// GEMMs run in order, so they can share one; two streams cannot), and a Plan per configuration.
// Creating a handle, allocating 32 MiB, building descriptors and layouts and running the heuristic
// cost far more host time than a small GEMM, and training issues the same few configurations every
// step: after the first, a GEMM only sets its bias and pre-activation pointers.
struct DeviceCache {
  Handle handle;
  std::map<cudaStream_t, void*> workspaces;
  std::map<std::string, std::unique_ptr<Plan>> plans;
  DeviceCache() = default;
  DeviceCache(const DeviceCache&) = delete;
  DeviceCache& operator=(const DeviceCache&) = delete;
  ~DeviceCache() {
    for (const auto& [stream, data] : workspaces) cudaFree(data);  // at thread exit; errors do not matter then
  }
  void* workspace(cudaStream_t stream) {
    void*& data = workspaces[stream];
    if (data == nullptr) {
      check(cudaMalloc(&data, workspace_bytes), "cudaMalloc(cuBLASLt workspace)");
      loom::detail::count_device_call(loom::detail::DeviceCall::allocation);
    }
    return data;
  }
};

DeviceCache& device_cache(int device) {
  thread_local std::map<int, std::unique_ptr<DeviceCache>> caches;
  std::unique_ptr<DeviceCache>& cache = caches[device];
  if (!cache) cache = std::make_unique<DeviceCache>();
  return *cache;
}

// Largest power of two (up to 256) dividing the address: what cuBLASLt may assume of it.
std::uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

std::int64_t stride_of(const StridedMatrix& m) { return m.batch == 1 ? 0 : m.batch_stride; }

// What cuBLASLt may assume about every matrix of an operand: the base pointer's alignment, reduced
// by the alignment of the row and batch offsets.
std::uint32_t operand_alignment(const void* base, std::int64_t ld, std::int64_t batch_stride, std::size_t element) {
  std::uint32_t alignment = alignment_of(base);
  for (std::int64_t offset : {ld, batch_stride}) {
    if (offset != 0) alignment = std::min(alignment, alignment_of(reinterpret_cast<const void*>(offset * static_cast<std::int64_t>(element))));
  }
  return alignment;
}


}  // namespace

void gemm_cublaslt(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
                   const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, void* stream) {
  const detail::CudaDeviceGuard guard(d.tensor.device());
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const DType input = a.tensor.dtype(), output = d.tensor.dtype();
  const GemmEpilogue& e = options.epilogue;
  const std::string what = "cuBLASLt GEMM (" + std::to_string(shape.batch) + " x " + std::to_string(shape.m) + " x " +
                           std::to_string(shape.n) + " x " + std::to_string(shape.k) + ", " +
                           std::string(to_string(options.precision)) + ")";
  // An empty D still has a bias gradient (length M: zeros, or the sums of op(A)'s rows when N = 0).
  const auto bias_grad = [&] {
    if (e.bias_grad.defined()) gemm_bias_grad(a, options.trans_a, shape, e.bias_grad, stream);
  };
  if (shape.m == 0 || shape.n == 0) return bias_grad();
  // K = 0: D = beta C + bias (and GELU) by loom's epilogue alone; cuBLASLt is not asked (its
  // heuristic may have no algorithm for k = 0, and cuBLAS has had k = 0 bugs).
  if (shape.k == 0) {
    gemm_empty_k(c, d, options, shape, stream);
    return bias_grad();
  }

  DeviceCache& cache = device_cache(d.tensor.device().index());
  const bool gelu = e.activation == Activation::gelu, bias = e.bias.defined(), aux = e.pre_activation.defined();
  // cuBLASLt keeps the pre-activation only with a leading dimension and batch stride divisible by 8
  // and a 16-byte aligned pointer; otherwise the GEMM writes the pre-activation itself and loom
  // applies GELU after.
  const bool fused_aux = aux && shape.n % 8 == 0 && (shape.batch == 1 || (shape.m * shape.n) % 8 == 0) &&
                         alignment_of(e.pre_activation.raw_data()) >= 16;
  const bool gelu_after = aux && !fused_aux;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu && fused_aux) epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else if (gelu && !gelu_after) epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else if (bias) epilogue = CUBLASLT_EPILOGUE_BIAS;

  // cuBLASLt's A = our B (column-major b.cols x b.rows), its B = our A, C/D = D^T (N x M). When
  // GELU follows, the GEMM's D is the contiguous pre-activation.
  void* d_data = gelu_after ? e.pre_activation.raw_data() : d.tensor.raw_data();
  const std::int64_t d_ld = gelu_after ? shape.n : d.ld;
  const std::int64_t d_stride = gelu_after ? (shape.batch == 1 ? 0 : shape.m * shape.n) : stride_of(d);
  const std::int64_t c_ld = c ? c->ld : d_ld, c_stride = c ? stride_of(*c) : d_stride;
  const void* c_data = c ? c->tensor.raw_data() : d_data;
  const std::size_t in_size = dtype_size(input), out_size = dtype_size(output);
  const std::uint32_t align_a = operand_alignment(b.tensor.raw_data(), b.ld, stride_of(b), in_size),
                      align_b = operand_alignment(a.tensor.raw_data(), a.ld, stride_of(a), in_size),
                      align_c = operand_alignment(c_data, c_ld, c_stride, out_size),
                      align_d = operand_alignment(d_data, d_ld, d_stride, out_size);

  // Everything a plan depends on: the descriptor's settings, the layouts and the alignments (not
  // the pointers themselves).
  const std::string key = loom::detail::concat(
      static_cast<int>(options.precision), options.trans_a, options.trans_b, ' ', static_cast<int>(epilogue), ' ',
      static_cast<int>(input), static_cast<int>(output), ' ', shape.batch, 'x', shape.m, 'x', shape.n, 'x', shape.k,
      ' ', a.ld, ',', stride_of(a), ' ', b.ld, ',', stride_of(b), ' ', c_ld, ',', c_stride, ' ', d_ld, ',', d_stride,
      ' ', align_a, ',', align_b, ',', align_c, ',', align_d, ' ', fused_aux);
  std::unique_ptr<Plan>& plan = cache.plans[key];
  if (!plan) {
    auto made = std::unique_ptr<Plan>(new Plan{
        MatmulDesc(options.precision == GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F),
        Layout(input, b.cols, b.rows, b.ld, shape.batch, stride_of(b)),
        Layout(input, a.cols, a.rows, a.ld, shape.batch, stride_of(a)),
        Layout(output, shape.n, shape.m, c_ld, shape.batch, c_stride),
        Layout(output, shape.n, shape.m, d_ld, shape.batch, d_stride)});
    made->desc.set(CUBLASLT_MATMUL_DESC_TRANSA, options.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    made->desc.set(CUBLASLT_MATMUL_DESC_TRANSB, options.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    made->desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    if (bias) made->desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(output));
    if (fused_aux) {
      // pre_activation is [batch, M, N] row-major: column-major N x M, ld N.
      made->desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, shape.n);
      made->desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, shape.m * shape.n);
    }
    Preference preference;
    preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
    preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(cache.handle.value, made->desc.value, made->a.value, made->b.value,
                                         made->c.value, made->d.value, preference.value, 1, &heuristic, &found),
          what + ": cublasLtMatmulAlgoGetHeuristic");
    loom::detail::count_device_call(loom::detail::DeviceCall::blas_algorithm_search);
    if (found == 0) fail(ErrorCategory::cuda, what, ": cuBLASLt has no algorithm for this configuration");
    made->algo = heuristic.algo;
    plan = std::move(made);
  }

  // cuBLASLt wants the bias in D's dtype and 16-byte aligned (a bias that is a view at an odd
  // offset fails or reads wrongly): otherwise it is copied (a 16-bit bias for an f32 D widened,
  // exactly) into stream-ordered scratch, which is aligned.
  std::optional<Workspace> staged;
  if (bias) {
    const void* bias_data = e.bias.raw_data();
    if (e.bias.dtype() != output || alignment_of(bias_data) < bias_alignment) {
      staged.emplace(static_cast<std::size_t>(shape.n) * dtype_size(output), s);
      const Tensor copy = Tensor::from_blob(staged->data, Shape{shape.n}, output, d.tensor.device());
      cast(e.bias, copy, {}, stream);
      bias_data = staged->data;
    }
    plan->desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_data);
  }
  if (fused_aux) plan->desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.pre_activation.raw_data());

  const float alpha = options.alpha, beta = c ? options.beta : 0.0f;
  check(cublasLtMatmul(cache.handle.value, plan->desc.value, &alpha, b.tensor.raw_data(), plan->a.value,
                       a.tensor.raw_data(), plan->b.value, &beta, c_data, plan->c.value, d_data, plan->d.value,
                       &plan->algo, cache.workspace(s), workspace_bytes, s),
        what + ": cublasLtMatmul");
  if (gelu_after) gemm_gelu_from_pre_activation(e.pre_activation, d, shape, stream);
  bias_grad();
}

}  // namespace loom::kernels::cuda
