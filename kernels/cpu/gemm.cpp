// CPU GEMM. Per batch, each operand becomes fp32: a zero-copy view of f32 data in fp32 precision,
// otherwise a converted copy rounded as tensor cores round it (TF32: to nearest, ties away; f16
// and bf16 are exact in fp32). The product runs on loom's packed fp32 engine (sgemm.hpp), straight
// into D when there is nothing to apply, otherwise into an fp32 buffer that the epilogue reads.
// Many small matrices are spread over threads one matrix each; large ones split their rows.
#include "kernels/cpu/gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "kernels/cpu/float_types.hpp"
#include "kernels/cpu/sgemm.hpp"
#include "loom/kernels/activation.hpp"

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
};

// D rows [row_begin, row_end) from the fp32 product rows (product_ld apart; the product may be D
// itself when D is f32), in D's dtype TOut. One pass per step of the epilogue, each a plain loop
// the compiler vectorizes; the order of operations per element is fixed.
template <class TOut>
void epilogue_rows(const EpilogueArgs& args, const float* product, std::int64_t product_ld, std::int64_t row_begin,
                   std::int64_t row_end) {
  const GemmOptions& o = *args.options;
  const GemmEpilogue& e = o.epilogue;
  const StridedMatrix& d = *args.d;
  const std::optional<StridedMatrix>& c = *args.c;
  const std::int64_t n = args.n;
  TOut* out = d.tensor.data<TOut>() + matrix_offset(d, args.batch);
  const TOut* c_data = c ? c->tensor.data<TOut>() + matrix_offset(*c, args.batch) : nullptr;
  TOut* pre = e.pre_activation.defined() ? e.pre_activation.data<TOut>() + args.batch * args.m * n : nullptr;
  std::vector<float> bias(e.bias.defined() ? static_cast<std::size_t>(n) : 0);
  if (!bias.empty()) {
    visit_float_dtype(e.bias.dtype(), [&]<class T>() {
      for (std::int64_t j = 0; j < n; ++j) bias[static_cast<std::size_t>(j)] = to_f32(e.bias.data<T>()[j]);
    });
  }
  const bool gelu = e.activation == Activation::gelu;
  std::vector<float> row(static_cast<std::size_t>(n));
  float* v = row.data();
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    const float* p = product + (i - row_begin) * product_ld;
    for (std::int64_t j = 0; j < n; ++j) v[j] = o.alpha * p[j];
    if (c_data) {
      const TOut* c_row = c_data + i * c->ld;
      for (std::int64_t j = 0; j < n; ++j) v[j] += o.beta * to_f32(c_row[j]);
    }
    if (!bias.empty()) {
      for (std::int64_t j = 0; j < n; ++j) v[j] += bias[static_cast<std::size_t>(j)];
    }
    if (gelu) {
      if (pre) {
        TOut* pre_row = pre + i * n;
        for (std::int64_t j = 0; j < n; ++j) pre_row[j] = from_f32<TOut>(v[j]);
      }
      for (std::int64_t j = 0; j < n; ++j) v[j] = gelu_tanh(v[j]);
    }
    TOut* out_row = out + i * d.ld;
    for (std::int64_t j = 0; j < n; ++j) out_row[j] = from_f32<TOut>(v[j]);
  }
}

// The product can be computed straight into D: f32 D, alpha 1, no C.
bool product_in_place(const GemmOptions& o, const std::optional<StridedMatrix>& c, DType output) {
  return output == DType::f32 && o.alpha == 1.0f && !c;
}

// sum_k op(A)[i, k] over all batches, from the unrounded inputs, in double.
void bias_grad(const StridedMatrix& a, bool trans_a, const GemmShape& shape, const Tensor& out) {
  std::vector<double> sums(static_cast<std::size_t>(shape.m), 0.0);
  visit_float_dtype(a.tensor.dtype(), [&]<class T>() {
    for (std::int64_t b = 0; b < shape.batch; ++b) {
      const T* base = a.tensor.data<T>() + matrix_offset(a, b);
      for (std::int64_t r = 0; r < a.rows; ++r) {
        for (std::int64_t col = 0; col < a.cols; ++col) {
          sums[static_cast<std::size_t>(trans_a ? col : r)] += to_f32(base[r * a.ld + col]);
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
  const bool has_epilogue = options.epilogue.bias.defined() || options.epilogue.activation != Activation::none;
  if (product_in_place(options, c, d.tensor.dtype())) {
    float* out = d.tensor.data<float>() + matrix_offset(d, batch);
    sgemm(shape.m, shape.n, shape.k, lhs, rhs, out, d.ld, threads);
    if (!has_epilogue) return;
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
    for (int part = 0; part < parts; ++part) {
      const std::int64_t row_begin = shape.m * part / parts, row_end = shape.m * (part + 1) / parts;
      epilogue_rows<float>(args, out + row_begin * d.ld, d.ld, row_begin, row_end);
    }
    return;
  }
  std::vector<float> product(static_cast<std::size_t>(shape.m * shape.n));
  sgemm(shape.m, shape.n, shape.k, lhs, rhs, product.data(), shape.n, threads);
  visit_float_dtype(d.tensor.dtype(), [&]<class T>() {
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
    for (int part = 0; part < parts; ++part) {
      const std::int64_t row_begin = shape.m * part / parts, row_end = shape.m * (part + 1) / parts;
      epilogue_rows<T>(args, product.data() + row_begin * shape.n, shape.n, row_begin, row_end);
    }
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
    std::exception_ptr failure;  // an exception must not leave an OpenMP region
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
      try {
        gemm_matrix(a, b, c, d, options, shape, batch, 1);
      } catch (...) {
#pragma omp critical(loom_cpu_gemm_failure)
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  } else {
    for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
      gemm_matrix(a, b, c, d, options, shape, batch, threads_per_matrix);
    }
  }
  if (options.epilogue.bias_grad.defined()) bias_grad(a, options.trans_a, shape, options.epilogue.bias_grad);
}

}  // namespace loom::kernels::cpu
