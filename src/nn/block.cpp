#include "loom/nn/block.hpp"

#include "loom/core/error.hpp"
#include "loom/kernels/elementwise.hpp"
#include "src/nn/buffer.hpp"

namespace loom::nn {

std::string to_string(ActivationCheckpointing mode) {
  switch (mode) {
    case ActivationCheckpointing::none: return "none";
    case ActivationCheckpointing::selective: return "selective";
    case ActivationCheckpointing::full: return "full";
  }
  return "unknown";
}

ActivationCheckpointing parse_activation_checkpointing(const std::string& text) {
  for (const ActivationCheckpointing mode :
       {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
    if (text == to_string(mode)) return mode;
  }
  fail(ErrorCategory::invalid_argument, "activation checkpointing '", text, "' is not one of none, selective, full");
}

TransformerBlock::TransformerBlock(const std::string& name, std::int64_t channels, std::int64_t heads,
                                   const Precision& precision, Device device, AttentionKernel attention,
                                   comm::Communicator* tensor)
    : precision_(precision),
      ln1_(name + ".ln1", channels, precision, device),
      attn_(name + ".attn", channels, heads, precision, device, attention, tensor),
      ln2_(name + ".ln2", channels, precision, device),
      fc_(name + ".mlp.fc", channels, 4 * channels, {.bias = true, .gelu = true}, precision, device, tensor),
      fc_proj_(name + ".mlp.proj", 4 * channels, channels, true, precision, device, tensor) {}

void TransformerBlock::collect_parameters(std::vector<Parameter*>& out) {
  ln1_.collect_parameters(out);
  attn_.collect_parameters(out);
  ln2_.collect_parameters(out);
  fc_.collect_parameters(out);
  fc_proj_.collect_parameters(out);
}

void TransformerBlock::release_activations(ActivationCheckpointing mode) {
  if (mode == ActivationCheckpointing::none) return;
  if (mode == ActivationCheckpointing::selective) {
    // Each dropped buffer together with its consumer's handle on it (else it would not be free).
    ln1_.release_output();
    attn_.qkv().release_input();
    attn_.release_recomputable();
    ln2_.release_output();
    fc_.release_input();
    if (fc_.gelu_recomputable()) {
      fc_.release_gelu_output();
      fc_proj_.release_input();
    }
    fc_proj_.release_output();
    return;
  }
  ln1_.release_activations();
  attn_.release_activations();
  ln2_.release_activations();
  fc_.release_activations();
  fc_proj_.release_activations();
  detail::release(hidden_);
}

void TransformerBlock::recompute(ActivationCheckpointing mode, StreamRef stream) {
  if (mode == ActivationCheckpointing::none) return;
  require(input_.defined(), "transformer block: recompute before any forward");
  if (mode == ActivationCheckpointing::selective) {
    attn_.qkv().restore_input(ln1_.recompute_output(stream));
    attn_.recompute_probabilities(stream);
    fc_.restore_input(ln2_.recompute_output(stream));  // (ln2's input is the kept residual stream)
    if (fc_.gelu_recomputable()) fc_proj_.restore_input(fc_.recompute_gelu_output(stream));
    return;
  }
  const Tensor input = input_;  // (forward takes it by reference and keeps it again)
  forward(input, stream);
}

Tensor TransformerBlock::forward(const Tensor& x, StreamRef stream) {
  input_ = x;
  detail::ensure_buffer(hidden_, x.shape(), precision_.storage, x.device());
  detail::ensure_buffer(output_, x.shape(), precision_.storage, x.device());
  // hidden = x + attn(ln1(x)), and ln2(hidden), in one pass.
  const Tensor normed = ln2_.forward_residual(x, attn_.forward(ln1_.forward(x, stream), stream), hidden_, stream);
  const Tensor mlp = fc_proj_.forward(fc_.forward(normed, stream), stream);
  kernels::residual_add(hidden_, mlp, output_, stream);
  return output_;
}

Tensor TransformerBlock::backward(const Tensor& dy, StreamRef stream) {
  // The residual passes dy straight through and each branch adds its part, in its LayerNorm's
  // backward pass: dhidden = dy + ln2'(mlp'(dy)) in ln2's dx buffer, dx = dhidden + ln1'(attn'(dhidden))
  // in ln1's.
  const Tensor dhidden = ln2_.backward_residual(fc_.backward(fc_proj_.backward(dy, stream), stream), dy, stream);
  return ln1_.backward_residual(attn_.backward(dhidden, stream), dhidden, stream);
}

}  // namespace loom::nn
