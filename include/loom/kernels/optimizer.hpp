// Multi-tensor fused optimizer steps: every parameter tensor of a model in one call, fp32 master
// weights and moments, the gradient read in its own dtype, and an optional low-precision model
// copy of each parameter written in the same pass.
#pragma once

#include <cstdint>
#include <span>

#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"

namespace loom::kernels {

// loom's AdamW defaults, the one place they are written (optim::AdamWOptions takes them from
// here): the GPT-training choice (beta2 0.95, decoupled weight decay 0.1; PyTorch's own defaults
// are 0.999 and 0.01).
struct AdamWHyperparameters {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled: param -= lr * weight_decay * param
  std::int64_t step = 1;      // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (unscaling, clipping)
};

struct AdamWTensor {
  Tensor param;   // f32 master weights, updated in place
  Tensor grad;    // f32, f16 or bf16; same numel
  Tensor m, v;    // f32 moments, updated in place
  Tensor model;   // optional f16/bf16 copy of param, written (rounded to nearest even)
  bool decay = true;  // false for biases and norms
};

// PyTorch's AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p = p (1 - lr wd) - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
void adamw_step(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hp, StreamRef stream = {});

struct SgdHyperparameters {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;  // coupled (L2): g += weight_decay * p
  bool nesterov = false;
  std::int64_t step = 1;      // the momentum buffer is set to g on step 1
  float grad_scale = 1.0f;
};

struct SgdTensor {
  Tensor param;            // f32 master weights
  Tensor grad;             // f32, f16 or bf16
  Tensor momentum_buffer;  // f32; required when momentum != 0
  Tensor model;            // optional f16/bf16 copy of param
  bool decay = true;
};

// PyTorch's SGD: g += wd p; buf = step 1 ? g : momentum buf + (1 - dampening) g;
// g = nesterov ? g + momentum buf : buf; p -= lr g.
void sgd_step(std::span<const SgdTensor> tensors, const SgdHyperparameters& hp, StreamRef stream = {});

}  // namespace loom::kernels
