#include "loom/model/precision.hpp"

#include "loom/core/error.hpp"

namespace loom::model {

using kernels::GemmPrecision;

Precision Precision::fp32() { return {DType::f32, GemmPrecision::fp32, DType::f32, false}; }
Precision Precision::tf32() { return {DType::f32, GemmPrecision::tf32, DType::f32, false}; }
Precision Precision::fp16() { return {DType::f16, GemmPrecision::fp16, DType::f32, true}; }
Precision Precision::bf16() { return {DType::bf16, GemmPrecision::bf16, DType::f32, false}; }

Precision Precision::parse(std::string_view name) {
  if (name == "fp32") return fp32();
  if (name == "tf32") return tf32();
  if (name == "fp16") return fp16();
  if (name == "bf16") return bf16();
  fail(ErrorCategory::invalid_argument, "unknown precision '", name, "'; expected fp32, tf32, fp16 or bf16");
}

void Precision::validate() const {
  require(storage == kernels::input_dtype(gemm), "precision: ", kernels::to_string(gemm), " GEMMs take ",
          kernels::input_dtype(gemm), " operands, but the storage dtype is ", storage);
  require(grad == DType::f32, "precision: gradients are accumulated in f32, got ", grad);
}

std::string Precision::name() const { return std::string(kernels::to_string(gemm)); }

}  // namespace loom::model
