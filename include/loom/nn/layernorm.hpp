// LayerNorm over the last dimension with a learned scale and shift (fp32 statistics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/stream.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/nn/precision.hpp"

namespace loom::nn {

class LayerNorm {
 public:
  LayerNorm(const std::string& name, std::int64_t channels, const Precision& precision, Device device,
            float eps = 1e-5f);

  // x: [..., C]. Returns this layer's output buffer (valid until the next forward).
  Tensor forward(const Tensor& x, StreamRef stream = {});
  // forward(a + b) that also writes the sum into `sum` (shaped like a; the residual stream),
  // with the add fused into the normalisation's pass on a GPU. The same bits as
  // residual_add then forward.
  Tensor forward_residual(const Tensor& a, const Tensor& b, const Tensor& sum, StreamRef stream = {});
  // Accumulates the weight and bias gradients, marks them ready, returns dx (a buffer).
  Tensor backward(const Tensor& dy, StreamRef stream = {});
  // backward(dy) plus the gradient that reaches the input along a residual branch, in one pass
  // on the CPU (kernels::layernorm_backward_residual): the same bits as residual_add(dresidual,
  // backward(dy)). dresidual is shaped like the input and must not be this LayerNorm's dx buffer.
  Tensor backward_residual(const Tensor& dy, const Tensor& dresidual, StreamRef stream = {});

  Parameter& weight() noexcept { return weight_; }
  Parameter& bias() noexcept { return bias_; }
  void collect_parameters(std::vector<Parameter*>& out);
  // Drops the buffers of the last forward and backward (activation checkpointing frees them between
  // a unit's forward and its recomputation in backward); the next forward allocates them again.
  void release_activations();
  // Selective recomputation (nn/block.hpp): release_output() drops the normalised output, keeping
  // the input handle and the statistics; recompute_output() normalises the kept input again into a
  // buffer and returns it as rows [rows, C]: the forward's bits (forward_residual's normalisation
  // is the same as forward of the sum).
  void release_output();
  Tensor recompute_output(StreamRef stream = {});

 private:
  // Keeps input_rows ([rows, C]) for backward and sizes the output and statistics buffers.
  void prepare_forward(const Tensor& input_rows);
  std::int64_t channels_;
  float eps_;
  Precision precision_;
  Parameter weight_, bias_;
  Tensor input_, output_, mean_, rstd_, dx_;
};

}  // namespace loom::nn
