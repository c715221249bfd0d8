// CPU GEMM. Per batch, each operand becomes fp32: a zero-copy view of f32 data in fp32 precision,
// otherwise a converted copy rounded as tensor cores round it (TF32: to nearest, ties away; f16
// and bf16 are exact in fp32). The product runs on loom's packed fp32 engine (sgemm.hpp), straight
// into D for an f32 D with alpha 1 and no C (or C = D, beta 1), a bias added by the engine and
// GELU run after it; otherwise into an fp32 buffer that the epilogue reads.
// Many small matrices are spread over threads one matrix each; large ones split their rows.
#include "kernels/cpu/gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/region_failure.hpp"
#include "kernels/cpu/sgemm.hpp"

namespace loom::kernels::cpu {

namespace {

std::int64_t matrix_offset(const StridedMatrix& m, std::int64_t batch_index) {
  return (m.batch == 1 ? 0 : batch_index) * m.batch_stride;
}

// One batch of an operand as fp32 (before any transpose).
class Fp32Operand {
 public:
  Fp32Operand(const StridedMatrix& m, std::int64_t batch_index, GemmPrecision precision)
      : rows_(m.rows), cols_(m.cols), ld_(m.ld) {
    const std::int64_t offset = matrix_offset(m, batch_index);
    if (precision == GemmPrecision::fp32) {
      data_ = m.tensor.data<float>() + offset;
      return;
    }
    copy_.resize(static_cast<std::size_t>(rows_ * cols_));
    visit_float_dtype(m.tensor.dtype(), [&]<class T>() {
      const T* src = m.tensor.data<T>() + offset;
      const bool tf32 = precision == GemmPrecision::tf32;
#pragma omp parallel for if (rows_ * cols_ > (1 << 15))
      for (std::int64_t r = 0; r < rows_; ++r) {
        float* dst = copy_.data() + r * cols_;
        for (std::int64_t c = 0; c < cols_; ++c) {
          const float v = to_f32(src[r * ld_ + c]);
          dst[c] = tf32 ? round_to_tf32(v, Tf32Rounding::nearest_away) : v;
        }
      }
    });
    data_ = copy_.data();
    ld_ = cols_;
  }
  // op(X) as the GEMM engine's strided operand.
  SgemmOperand operand(bool transposed) const {
    return transposed ? SgemmOperand{data_, 1, ld_} : SgemmOperand{data_, ld_, 1};
  }

 private:
  std::int64_t rows_, cols_, ld_;
  const float* data_ = nullptr;
  std::vector<float> copy_;
};

struct EpilogueArgs {
  const GemmOptions* options;
  const std::optional<StridedMatrix>* c;
  const StridedMatrix* d;
  std::int64_t batch, m, n;
  bool bias_added = false;  // the product already holds the bias (sgemm added it)
};

// A float buffer per thread that only grows: the fp32 product and the epilogue's rows are reused
// by every later GEMM on the thread instead of being allocated per call.
std::vector<float>& scratch(int which, std::int64_t floats) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& buffer = buffers[which];
  if (static_cast<std::int64_t>(buffer.size()) < floats) buffer.resize(static_cast<std::size_t>(floats));
  return buffer;
}

// The epilogue's bias as n floats (empty when there is none).
std::vector<float> bias_f32(const GemmEpilogue& e, std::int64_t n) {
  std::vector<float> bias(e.bias.defined() ? static_cast<std::size_t>(n) : 0);
  if (!bias.empty()) visit_float_dtype(e.bias.dtype(), [&]<class T>() { to_f32(e.bias.data<T>(), bias.data(), n); });
  return bias;
}

// body(row_begin, row_end) over m rows in `parts` even shares, each on a thread of its own.
template <class Body>
void for_row_parts(int parts, std::int64_t m, Body&& body) {
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) body(m * part / parts, m * (part + 1) / parts);
}

// D rows [row_begin, row_end) from the fp32 product rows (product_ld apart; the product may be D
// itself when D is f32), in D's dtype TOut, through the variant's epilogue_row: alpha product +
// beta C + bias, then GELU (keeping the pre-activation). Rows of other dtypes pass through fp32
// scratch rows.
template <class TOut>
void epilogue_rows(const EpilogueArgs& args, const float* product, std::int64_t product_ld, std::int64_t row_begin,
                   std::int64_t row_end) {
  const GemmOptions& o = *args.options;
  const GemmEpilogue& e = o.epilogue;
  const StridedMatrix& d = *args.d;
  const std::optional<StridedMatrix>& c = *args.c;
  const std::int64_t n = args.n;
  constexpr bool f32 = std::is_same_v<TOut, float>;
  TOut* out = d.tensor.data<TOut>() + matrix_offset(d, args.batch);
  const TOut* c_data = c && o.beta != 0.0f ? c->tensor.data<TOut>() + matrix_offset(*c, args.batch) : nullptr;
  TOut* pre = e.pre_activation.defined() ? e.pre_activation.data<TOut>() + args.batch * args.m * n : nullptr;
  const std::vector<float> bias = args.bias_added ? std::vector<float>() : bias_f32(e, n);
  float* row_scratch = f32 ? nullptr : scratch(1, 3 * n).data();
  std::vector<TOut> rounded(!f32 && e.activation == Activation::gelu ? static_cast<std::size_t>(n) : 0);
  const CpuKernels& kernels = cpu_kernels();
  const bool gelu = e.activation == Activation::gelu;
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    EpilogueRow row{product + (i - row_begin) * product_ld, nullptr, o.alpha, o.beta, bias.empty() ? nullptr : bias.data(),
                    nullptr, nullptr, n, gelu};
    if constexpr (f32) {
      row.c = c_data ? c_data + i * c->ld : nullptr;
      row.pre = gelu && pre ? pre + i * n : nullptr;
      row.out = out + i * d.ld;
      kernels.epilogue_row(row);
    } else {
      if (c_data) {
        to_f32(c_data + i * c->ld, row_scratch, n);
        row.c = row_scratch;
      }
      if (!gelu) {
        row.out = row_scratch + 2 * n;
        kernels.epilogue_row(row);
        from_f32(row.out, out + i * d.ld, n);
        continue;
      }
      // GELU of the pre-activation rounded to D's dtype: the value gelu_backward differentiates,
      // and what gelu_forward of the stored pre-activation recomputes bit for bit (selective
      // activation checkpointing, nn/block.hpp).
      row.gelu = false;
      row.out = row_scratch + n;
      kernels.epilogue_row(row);
      from_f32(row.out, rounded.data(), n);
      if (pre) std::copy(rounded.begin(), rounded.end(), pre + i * n);
      to_f32(rounded.data(), row.out, n);
      kernels.gelu_forward(row.out, row_scratch + 2 * n, n);
      from_f32(row_scratch + 2 * n, out + i * d.ld, n);
    }
  }
}

// The product can be computed straight into D: f32 D, alpha 1, no C.
bool product_in_place(const GemmOptions& o, const std::optional<StridedMatrix>& c, DType output) {
  return output == DType::f32 && o.alpha == 1.0f && (!c || o.beta == 0.0f);
}

// D += op(A) op(B) straight into D: f32 D, alpha 1, beta 1 and C the very same matrices as D.
bool accumulate_in_place(const GemmOptions& o, const std::optional<StridedMatrix>& c, const StridedMatrix& d) {
  return d.tensor.dtype() == DType::f32 && o.alpha == 1.0f && o.beta == 1.0f && c &&
         c->tensor.raw_data() == d.tensor.raw_data() && c->ld == d.ld && c->batch == d.batch &&
         c->batch_stride == d.batch_stride && c->tensor.dtype() == DType::f32;
}

// sum_k op(A)[i, k] over all batches, from the unrounded inputs, in double.
void bias_grad(const StridedMatrix& a, bool trans_a, const GemmShape& shape, const Tensor& out) {
  std::vector<double> sums(static_cast<std::size_t>(shape.m), 0.0);
  const CpuKernels& kernels = cpu_kernels();
  visit_float_dtype(a.tensor.dtype(), [&]<class T>() {
    std::vector<float> row(std::is_same_v<T, float> ? 0 : static_cast<std::size_t>(a.cols));
    for (std::int64_t b = 0; b < shape.batch; ++b) {
      const T* base = a.tensor.data<T>() + matrix_offset(a, b);
      if (!trans_a) {  // each row of A is one sum
        for (std::int64_t r = 0; r < a.rows; ++r) {
          double sum = 0.0;
          for (std::int64_t col = 0; col < a.cols; ++col) sum += to_f32(base[r * a.ld + col]);
          sums[static_cast<std::size_t>(r)] += sum;
        }
      } else if constexpr (std::is_same_v<T, float>) {
        kernels.column_sums(base, a.rows, a.cols, a.ld, sums.data());
      } else {
        for (std::int64_t r = 0; r < a.rows; ++r) {
          to_f32(base + r * a.ld, row.data(), a.cols);
          kernels.column_sums(row.data(), 1, a.cols, a.cols, sums.data());
        }
      }
    }
  });
  float* dst = out.data<float>();
  for (std::int64_t i = 0; i < shape.m; ++i) dst[i] = static_cast<float>(sums[static_cast<std::size_t>(i)]);
}

// Batch `batch` of D with up to `threads` threads.
void gemm_matrix(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
                 const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape, std::int64_t batch,
                 int threads) {
  const Fp32Operand op_a(a, batch, options.precision), op_b(b, batch, options.precision);
  const SgemmOperand lhs = op_a.operand(options.trans_a), rhs = op_b.operand(options.trans_b);
  const EpilogueArgs args{&options, &c, &d, batch, shape.m, shape.n};
  const int parts = shape.m * shape.n >= (std::int64_t{1} << 16) ? threads : 1;
  const bool accumulate = accumulate_in_place(options, c, d);
  if (accumulate || product_in_place(options, c, d.tensor.dtype())) {
    float* out = d.tensor.data<float>() + matrix_offset(d, batch);
    // The bias joins the product in the micro-kernel's registers (its rounding is the epilogue's),
    // so a bias alone needs no pass over D: that pass cost 0.27 ns an element from memory.
    const std::vector<float> bias = bias_f32(options.epilogue, shape.n);
    // With GELU and a kept pre-activation, the product goes straight into the pre-activation and GELU
    // reads it from there into D: one write of D less than an epilogue copying it over.
    const bool gelu = options.epilogue.activation == Activation::gelu;
    float* pre = gelu && !accumulate && options.epilogue.pre_activation.defined()
                     ? options.epilogue.pre_activation.data<float>() + batch * shape.m * shape.n
                     : nullptr;
    sgemm(shape.m, shape.n, shape.k, lhs, rhs, pre ? pre : out, pre ? shape.n : d.ld, threads, cpu_kernels(),
          accumulate, SgemmCausal::none, bias.empty() ? nullptr : bias.data());
    if (!gelu) return;
    if (pre) {
      const CpuKernels& kernels = cpu_kernels();
      for_row_parts(parts, shape.m, [&](std::int64_t row_begin, std::int64_t row_end) {
        for (std::int64_t i = row_begin; i < row_end; ++i) kernels.gelu_forward(pre + i * shape.n, out + i * d.ld, shape.n);
      });
      return;
    }
    const std::optional<StridedMatrix> none;
    const EpilogueArgs in_place{&options, &none, &d, batch, shape.m, shape.n, true};
    for_row_parts(parts, shape.m, [&](std::int64_t row_begin, std::int64_t row_end) {
      epilogue_rows<float>(in_place, out + row_begin * d.ld, d.ld, row_begin, row_end);
    });
    return;
  }
  float* product = scratch(0, shape.m * shape.n).data();
  sgemm(shape.m, shape.n, shape.k, lhs, rhs, product, shape.n, threads);
  visit_float_dtype(d.tensor.dtype(), [&]<class T>() {
    for_row_parts(parts, shape.m, [&](std::int64_t row_begin, std::int64_t row_end) {
      epilogue_rows<T>(args, product + row_begin * shape.n, shape.n, row_begin, row_end);
    });
  });
}

}  // namespace

void gemm(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
          const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape) {
  const int threads = omp_get_max_threads();
  const std::int64_t flops = shape.m * shape.n * std::max<std::int64_t>(shape.k, 1);
  // Below ~2^18 multiply-adds a thread team costs more than it saves; below ~2^24 per matrix,
  // whole matrices per thread beat splitting each one.
  const int threads_per_matrix = flops >= (std::int64_t{1} << 18) ? threads : 1;
  const bool across_batches = threads > 1 && shape.batch >= threads && flops < (std::int64_t{1} << 24);
  if (across_batches) {
    RegionFailure failure;  // an exception must not leave an OpenMP region
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
      failure.capture([&] { gemm_matrix(a, b, c, d, options, shape, batch, 1); });
    }
    failure.rethrow();
  } else {
    for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
      gemm_matrix(a, b, c, d, options, shape, batch, threads_per_matrix);
    }
  }
  if (options.epilogue.bias_grad.defined()) bias_grad(a, options.trans_a, shape, options.epilogue.bias_grad);
}

}  // namespace loom::kernels::cpu
