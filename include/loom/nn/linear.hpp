// y = x W^T + b over the last dimension (W: [out, in], PyTorch's layout), optionally followed by
// GELU fused into the GEMM epilogue with the pre-activation kept for backward.
//
// Its parameters are descriptions: the model's model::ParameterSpace gives them storage, and
// ParameterSpace::initialize(seed) their values: W ~ N(0, 0.02^2) (GPT-2's rule) and b = 0 unless
// the model sets another model::Init on weight() (train_mlp: N(0, 1/fan_in)).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/nn/precision.hpp"

namespace loom::nn {

struct LinearOptions {
  bool bias = true;
  bool gelu = false;
};

class Linear {
 public:
  Linear(const std::string& name, std::int64_t in_features, std::int64_t out_features, LinearOptions options,
         const Precision& precision, Device device);

  // x: [..., in] in the storage dtype. Returns the layer's output buffer [..., out], valid until
  // the next forward; x is kept (not copied) for backward.
  Tensor forward(const Tensor& x, StreamRef stream = {});
  // dy: [..., out]. Accumulates into the gradients, marks them ready, and returns dx [..., in]
  // (a buffer of this layer, valid until the next backward).
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  Parameter& weight() noexcept { return weight_; }
  Parameter* bias() noexcept { return bias_.get(); }
  void collect_parameters(std::vector<Parameter*>& out);
  // Drops the buffers of the last forward and backward (activation checkpointing frees them between
  // a unit's forward and its recomputation in backward); the next forward allocates them again.
  void release_activations();

  // Selective recomputation (nn/block.hpp) keeps what the GEMMs made and recomputes the cheap rest:
  // release_output() drops the output buffer (of a layer whose output backward never reads: its
  // consumer copied it into the residual stream); release_input() drops the handle on the input
  // (another layer's buffer, which that layer recomputes) and restore_input(x) gives backward the
  // recomputed one. A GELU layer's output can be recomputed from its kept pre-activation where that
  // gives the forward's bits (gelu_recomputable(): the CPU, whose epilogue applies GELU to the
  // stored pre-activation; on CUDA the cuBLASLt epilogue rounds after GELU, so it stays kept);
  // release_gelu_output() then drops it and recompute_gelu_output() returns it, recomputed.
  void release_output();
  void release_input() { input_ = Tensor(); }
  void restore_input(const Tensor& x);
  bool gelu_recomputable() const noexcept;
  void release_gelu_output();
  Tensor recompute_gelu_output(StreamRef stream = {});

 private:
  std::int64_t in_, out_;
  LinearOptions options_;
  Precision precision_;
  Parameter weight_;
  std::unique_ptr<Parameter> bias_;
  Tensor input_;                          // the last forward's x, as rows
  Tensor output_, pre_activation_;        // [rows, out]
  Tensor dx_, dpre_, bias_grad_scratch_;  // backward buffers
};

}  // namespace loom::nn
