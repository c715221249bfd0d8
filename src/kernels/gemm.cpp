// GEMM argument validation and dispatch by device.
#include "loom/kernels/gemm.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cuda/gemm.hpp"
#include "src/kernels/gemm_rule.hpp"
#include "validate.hpp"
#include "loom/core/error.hpp"

namespace loom::kernels {

std::string_view to_string(GemmPrecision precision) noexcept {
  switch (precision) {
    case GemmPrecision::fp32: return "fp32";
    case GemmPrecision::tf32: return "tf32";
    case GemmPrecision::fp16: return "fp16";
    case GemmPrecision::bf16: return "bf16";
  }
  return "invalid";
}

GemmPrecision parse_gemm_precision(std::string_view text) {
  for (GemmPrecision p : {GemmPrecision::fp32, GemmPrecision::tf32, GemmPrecision::fp16, GemmPrecision::bf16}) {
    if (to_string(p) == text) return p;
  }
  fail(ErrorCategory::invalid_argument, "unknown GEMM precision '", text, "'; expected fp32, tf32, fp16 or bf16");
}

DType input_dtype(GemmPrecision precision) noexcept {
  switch (precision) {
    case GemmPrecision::fp16: return DType::f16;
    case GemmPrecision::bf16: return DType::bf16;
    default: return DType::f32;
  }
}

namespace {

void require_same_device(const Tensor& tensor, Device device, const char* name) {
  require(tensor.device() == device, "GEMM operand ", name, " is on ", tensor.device(), " but A is on ", device);
}

// Batch count of an operand against the GEMM's: equal, or one matrix broadcast with stride 0.
void require_batch(const StridedMatrix& m, std::int64_t batch, const char* name) {
  require(m.batch == batch || (m.batch == 1) || m.batch_stride == 0, "GEMM operand ", name, " has batch ", m.batch,
          " but the GEMM has batch ", batch);
}

void validate_epilogue(const GemmEpilogue& e, const GemmShape& shape, DType input, DType output, Device device) {
  if (e.bias.defined()) {
    require_same_device(e.bias, device, "bias");
    require(e.bias.numel() == shape.n && e.bias.rank() == 1, "GEMM bias must be [", shape.n, "], got ",
            e.bias);
    require(e.bias.dtype() == DType::f32 || e.bias.dtype() == input, "GEMM bias must be f32 or ", input, ", got ",
            e.bias.dtype());
  }
  if (e.pre_activation.defined()) {
    require(e.activation != Activation::none, "GEMM pre_activation given without an activation to precede");
    require_same_device(e.pre_activation, device, "pre_activation");
    require(e.pre_activation.numel() == shape.batch * shape.m * shape.n && e.pre_activation.dtype() == output,
            "GEMM pre_activation must hold ", shape.batch, " x ", shape.m, " x ", shape.n, " ", output,
            " elements, got ", e.pre_activation);
  }
  if (e.bias_grad.defined()) {
    require_same_device(e.bias_grad, device, "bias_grad");
    require(e.bias_grad.numel() == shape.m && e.bias_grad.rank() == 1 && e.bias_grad.dtype() == DType::f32,
            "GEMM bias_grad must be f32 [", shape.m, "], got ", e.bias_grad);
  }
}

}  // namespace

void gemm(const StridedMatrix& a, const StridedMatrix& b, const std::optional<StridedMatrix>& c,
          const StridedMatrix& d, const GemmOptions& options, StreamRef stream) {
  a.validate("A");
  b.validate("B");
  d.validate("D");
  const Device device = a.tensor.device();
  require_same_device(b.tensor, device, "B");
  require_same_device(d.tensor, device, "D");

  const DType input = input_dtype(options.precision);
  require(a.tensor.dtype() == input && b.tensor.dtype() == input, "GEMM precision ", to_string(options.precision),
          " needs ", input, " inputs, got A ", a.tensor.dtype(), " and B ", b.tensor.dtype());
  const DType output = d.tensor.dtype();
  require(output == DType::f32 || output == input, "GEMM output must be f32 or ", input, ", got ", output);

  GemmShape shape;
  shape.m = options.trans_a ? a.cols : a.rows;
  shape.k = options.trans_a ? a.rows : a.cols;
  const std::int64_t k_of_b = options.trans_b ? b.cols : b.rows;
  shape.n = options.trans_b ? b.rows : b.cols;
  require(shape.k == k_of_b, "GEMM inner dimensions differ: op(A) is ", shape.m, " x ", shape.k, ", op(B) is ", k_of_b,
          " x ", shape.n);
  require(d.rows == shape.m && d.cols == shape.n, "GEMM output D is ", d.rows, " x ", d.cols, " but op(A) op(B) is ",
          shape.m, " x ", shape.n);
  shape.batch = std::max({a.batch, b.batch, d.batch});
  require_batch(a, shape.batch, "A");
  require_batch(b, shape.batch, "B");
  // Batches of D may follow one another or sit side by side within its rows (attention heads).
  const bool stacked = d.batch_stride >= (d.rows - 1) * d.ld + d.cols;
  const bool side_by_side = d.batch_stride >= d.cols && (d.batch - 1) * d.batch_stride + d.cols <= d.ld;
  require(d.batch == shape.batch && (d.batch == 1 || stacked || side_by_side), "GEMM output D must hold all ",
          shape.batch, " results without overlap (batch ", d.batch, ", stride ", d.batch_stride, ", ld ", d.ld, ")");
  if (options.beta != 0.0f) {
    require(c.has_value(), "GEMM with beta = ", options.beta, " needs C");
    c->validate("C");
    require_same_device(c->tensor, device, "C");
    require(c->tensor.dtype() == output, "GEMM C must have D's dtype ", output, ", got ", c->tensor.dtype());
    require(c->rows == shape.m && c->cols == shape.n, "GEMM C is ", c->rows, " x ", c->cols, " but D is ", shape.m,
            " x ", shape.n);
    require_batch(*c, shape.batch, "C");
  }
  validate_epilogue(options.epilogue, shape, input, output, device);
  // The CPU writes the product straight into the pre-activation, while A and B are still read.
  const Tensor& pre = options.epilogue.pre_activation;
  require(!pre.defined() || (!pre.shares_storage_with(a.tensor) && !pre.shares_storage_with(b.tensor)),
          "GEMM pre_activation must not share storage with A or B (the product is written into it)");

  const std::optional<StridedMatrix> used_c = options.beta != 0.0f ? c : std::nullopt;
  detail::dispatch(
      "gemm", device, stream, [&] { cpu::gemm(a, b, used_c, d, options, shape); },
      [&](void* s) {
        // automatic: the table in gemm_rule.cpp (docs/ARCHITECTURE.md, "GemmBackend::automatic").
        const detail::GemmCall call{options.precision, options.trans_a, options.trans_b, shape.m, shape.n, shape.k,
                                    options.epilogue.bias.defined() && options.epilogue.bias.dtype() == DType::f32 &&
                                        output != DType::f32};
        if (detail::choose_gemm_backend(options.backend, call) == GemmBackend::loom) {
          require(options.precision != GemmPrecision::fp32,
                  "gemm: GemmBackend::loom runs on tensor cores (tf32, fp16, bf16), got precision fp32 "
                  "(use automatic or cublaslt for exact fp32)");
          cuda::gemm_loom(a, b, used_c, d, options, shape, s);
        } else {
          cuda::gemm_cublaslt(a, b, used_c, d, options, shape, s);
        }
      });
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& d, const GemmOptions& options, StreamRef stream) {
  const StridedMatrix dm = StridedMatrix::of(d);
  gemm(StridedMatrix::of(a), StridedMatrix::of(b), dm, dm, options, stream);
}

}  // namespace loom::kernels
