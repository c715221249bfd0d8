// The mixed-precision policy of a model, as users know it from mixed-precision training: what the
// parameters and activations are stored in, how GEMMs compute, and whether the loss is scaled.
// Optimizers always keep fp32 master weights and moments; LayerNorm and softmax statistics are
// always fp32 (the kernels guarantee it); gradients are always accumulated in fp32 (a frequent
// token's or a long accumulation's small contributions would vanish in 16 bits).
#pragma once

#include <string>
#include <string_view>

#include "loom/core/dtype.hpp"
#include "loom/kernels/gemm.hpp"

namespace loom::model {

struct Precision {
  DType storage = DType::f32;                                 // parameters and activations
  kernels::GemmPrecision gemm = kernels::GemmPrecision::fp32;  // GEMM compute mode
  DType grad = DType::f32;                                    // parameter gradients
  bool loss_scaling = false;                                  // dynamic loss scaling (fp16 only)

  static Precision fp32();  // f32 storage, exact fp32 GEMMs
  static Precision tf32();  // f32 storage, TF32 tensor-core GEMMs
  static Precision fp16();  // f16 storage and GEMMs, dynamic loss scaling
  static Precision bf16();  // bf16 storage and GEMMs
  // "fp32", "tf32", "fp16" or "bf16"; anything else is an invalid_argument Error.
  static Precision parse(std::string_view name);

  // Throws an invalid_argument Error unless the storage dtype is the GEMM mode's input dtype
  // (f32 for fp32/tf32) and gradients are f32.
  void validate() const;
  // True when the optimizer needs fp32 master weights apart from the stored parameters.
  bool needs_master_weights() const noexcept { return storage != DType::f32; }
  std::string name() const;
};

}  // namespace loom::model
