// CPU GEMM. Per batch, each operand becomes fp32: a zero-copy view of f32 data in fp32 precision,
// otherwise a converted copy rounded as tensor cores round it (TF32: to nearest, ties away; f16
// and bf16 are exact in fp32). The rows of D are split across OpenMP threads; each thread runs
// Eigen's single-threaded fp32 GEMM on its rows (which scales better than Eigen's own threading
// on few cores) and then the epilogue on those rows.
#include "kernels/cpu/gemm.hpp"

#include <Eigen/Core>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/float_types.hpp"
#include "loom/kernels/activation.hpp"

namespace loom::kernels::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using MutableMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

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
  ConstMap map() const { return ConstMap(data_, rows_, cols_, Eigen::OuterStride<>(ld_)); }

 private:
  std::int64_t rows_, cols_, ld_;
  const float* data_ = nullptr;
  std::vector<float> copy_;
};

// Rows [row_begin, row_end) of op(A) op(B) into out (row-major, ld out_ld).
void multiply_rows(const ConstMap& a, bool trans_a, const ConstMap& b, bool trans_b, std::int64_t row_begin,
                   std::int64_t row_end, float* out, std::int64_t n, std::int64_t out_ld) {
  const std::int64_t rows = row_end - row_begin;
  MutableMap d(out, rows, n, Eigen::OuterStride<>(out_ld));
  if (!trans_a && !trans_b) d.noalias() = a.middleRows(row_begin, rows) * b;
  if (!trans_a && trans_b) d.noalias() = a.middleRows(row_begin, rows) * b.transpose();
  if (trans_a && !trans_b) d.noalias() = a.middleCols(row_begin, rows).transpose() * b;
  if (trans_a && trans_b) d.noalias() = a.middleCols(row_begin, rows).transpose() * b.transpose();
}

struct EpilogueArgs {
  const GemmOptions* options;
  const std::optional<StridedMatrix>* c;
  const StridedMatrix* d;
  std::int64_t batch, m, n;
};

// D rows [row_begin, row_end) from the fp32 product rows, in D's dtype TOut.
template <class TOut>
void epilogue_rows(const EpilogueArgs& args, const float* product, std::int64_t row_begin, std::int64_t row_end) {
  const GemmOptions& o = *args.options;
  const GemmEpilogue& e = o.epilogue;
  const StridedMatrix& d = *args.d;
  const std::optional<StridedMatrix>& c = *args.c;
  TOut* out = d.tensor.data<TOut>() + matrix_offset(d, args.batch);
  const TOut* c_data = c ? c->tensor.data<TOut>() + matrix_offset(*c, args.batch) : nullptr;
  TOut* pre = e.pre_activation.defined() ? e.pre_activation.data<TOut>() + args.batch * args.m * args.n : nullptr;
  std::vector<float> bias(e.bias.defined() ? static_cast<std::size_t>(args.n) : 0);
  if (!bias.empty()) {
    visit_float_dtype(e.bias.dtype(), [&]<class T>() {
      for (std::int64_t j = 0; j < args.n; ++j) bias[static_cast<std::size_t>(j)] = to_f32(e.bias.data<T>()[j]);
    });
  }
  const bool gelu = e.activation == Activation::gelu;
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    const float* p = product + (i - row_begin) * args.n;
    for (std::int64_t j = 0; j < args.n; ++j) {
      float value = o.alpha * p[j];
      if (c_data) value += o.beta * to_f32(c_data[i * c->ld + j]);
      if (!bias.empty()) value += bias[static_cast<std::size_t>(j)];
      if (gelu) {
        if (pre) pre[i * args.n + j] = from_f32<TOut>(value);
        value = gelu_tanh(value);
      }
      out[i * d.ld + j] = from_f32<TOut>(value);
    }
  }
}

bool trivial_epilogue(const GemmOptions& o, const std::optional<StridedMatrix>& c, DType output) {
  return output == DType::f32 && o.alpha == 1.0f && !c && !o.epilogue.bias.defined() &&
         o.epilogue.activation == Activation::none;
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

}  // namespace

void gemm(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
          const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape) {
  const DType output = d.tensor.dtype();
  const bool direct = trivial_epilogue(options, c, output);
  // Rows per thread: enough that each part's GEMM amortizes packing B.
  const std::int64_t min_rows = 32;
  const int parts = static_cast<int>(std::clamp<std::int64_t>(shape.m / min_rows, 1, omp_get_max_threads()));
  const bool worth_threads = shape.m * shape.n * std::max<std::int64_t>(shape.k, 1) >= (std::int64_t{1} << 18);

  for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
    const Fp32Operand op_a(a, batch, options.precision), op_b(b, batch, options.precision);
    const ConstMap a_map = op_a.map(), b_map = op_b.map();
    const EpilogueArgs args{&options, &c, &d, batch, shape.m, shape.n};
#pragma omp parallel for num_threads(parts) schedule(static, 1) if (worth_threads && parts > 1)
    for (int part = 0; part < parts; ++part) {
      const std::int64_t row_begin = shape.m * part / parts, row_end = shape.m * (part + 1) / parts;
      if (direct) {
        float* out = d.tensor.data<float>() + matrix_offset(d, batch) + row_begin * d.ld;
        if (shape.k == 0) {
          for (std::int64_t i = 0; i < row_end - row_begin; ++i) std::fill_n(out + i * d.ld, shape.n, 0.0f);
        } else {
          multiply_rows(a_map, options.trans_a, b_map, options.trans_b, row_begin, row_end, out, shape.n, d.ld);
        }
        continue;
      }
      std::vector<float> product(static_cast<std::size_t>((row_end - row_begin) * shape.n), 0.0f);
      if (shape.k > 0) {
        multiply_rows(a_map, options.trans_a, b_map, options.trans_b, row_begin, row_end, product.data(), shape.n,
                      shape.n);
      }
      visit_float_dtype(output, [&]<class T>() { epilogue_rows<T>(args, product.data(), row_begin, row_end); });
    }
  }
  if (options.epilogue.bias_grad.defined()) bias_grad(a, options.trans_a, shape, options.epilogue.bias_grad);
}

}  // namespace loom::kernels::cpu
