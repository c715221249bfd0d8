// CPU GEMM: each batch's operands are converted to fp32 row-major matrices, rounded the way tensor
// cores round them (TF32: round to nearest, ties away; f16/bf16 are exact in fp32), multiplied by
// Eigen in fp32 (multithreaded with OpenMP), then the epilogue runs per element.
#include "kernels/cpu/gemm.hpp"

#include <Eigen/Core>

#include <vector>

#include "loom/core/numeric.hpp"
#include "loom/kernels/activation.hpp"

namespace loom::kernels::cpu {

namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

float load(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f16: return half_bits_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[index]);
    default: return 0.0f;  // validated away
  }
}

void store(void* base, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[index] = value; break;
    case DType::f16: static_cast<std::uint16_t*>(base)[index] = float_to_half_bits(value); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[index] = float_to_bf16_bits(value); break;
    default: break;
  }
}

std::int64_t matrix_offset(const StridedMatrix& m, std::int64_t batch_index) {
  return (m.batch == 1 ? 0 : batch_index) * m.batch_stride;
}

// op(M) of one batch as an fp32 matrix, rounded to what the tensor cores would multiply.
template <class Load>
Matrix operand(const StridedMatrix& m, std::int64_t batch_index, bool transpose, Load&& load_element) {
  const std::int64_t base = matrix_offset(m, batch_index);
  Matrix out(transpose ? m.cols : m.rows, transpose ? m.rows : m.cols);
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (std::int64_t c = 0; c < m.cols; ++c) {
      const float value = load_element(base + r * m.ld + c);
      if (transpose) out(c, r) = value; else out(r, c) = value;
    }
  }
  return out;
}

}  // namespace

void gemm(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
          const StridedMatrix& d, const GemmOptions& options, const GemmShape& shape) {
  const DType input = a.tensor.dtype(), output = d.tensor.dtype();
  const bool tf32 = options.precision == GemmPrecision::tf32;
  auto loader = [tf32, input](const StridedMatrix& m) {
    const void* base = m.tensor.raw_data();
    return [base, input, tf32](std::int64_t index) {
      const float value = load(base, input, index);
      return tf32 ? round_to_tf32(value, Tf32Rounding::nearest_away) : value;
    };
  };
  const GemmEpilogue& epilogue = options.epilogue;
  const void* bias = epilogue.bias.defined() ? epilogue.bias.raw_data() : nullptr;
  void* pre_activation = epilogue.pre_activation.defined() ? epilogue.pre_activation.raw_data() : nullptr;
  std::vector<double> bias_grad(epilogue.bias_grad.defined() ? static_cast<std::size_t>(shape.m) : 0, 0.0);

  for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
    const Matrix op_a = operand(a, batch, options.trans_a, loader(a));
    const Matrix op_b = operand(b, batch, options.trans_b, loader(b));
    Matrix product(shape.m, shape.n);
    if (shape.k == 0) product.setZero(); else product.noalias() = op_a * op_b;

    if (!bias_grad.empty()) {
      // Sums of the unrounded inputs, as a GEMM epilogue reads them.
      const Matrix raw_a = operand(a, batch, options.trans_a, [&](std::int64_t i) { return load(a.tensor.raw_data(), input, i); });
      for (std::int64_t i = 0; i < shape.m; ++i) bias_grad[static_cast<std::size_t>(i)] += raw_a.row(i).cast<double>().sum();
    }

    const std::int64_t d_base = matrix_offset(d, batch);
    const std::int64_t c_base = c ? matrix_offset(*c, batch) : 0;
    for (std::int64_t i = 0; i < shape.m; ++i) {
      for (std::int64_t j = 0; j < shape.n; ++j) {
        float value = options.alpha * product(i, j);
        if (c) value += options.beta * load(c->tensor.raw_data(), output, c_base + i * c->ld + j);
        if (bias) value += load(bias, epilogue.bias.dtype(), j);
        if (epilogue.activation == Activation::gelu) {
          if (pre_activation) store(pre_activation, output, (batch * shape.m + i) * shape.n + j, value);
          value = gelu_tanh(value);
        }
        store(d.tensor.raw_data(), output, d_base + i * d.ld + j, value);
      }
    }
  }
  if (!bias_grad.empty()) {
    float* out = epilogue.bias_grad.data<float>();
    for (std::int64_t i = 0; i < shape.m; ++i) out[i] = static_cast<float>(bias_grad[static_cast<std::size_t>(i)]);
  }
}

}  // namespace loom::kernels::cpu
