// A GPT-2 style decoder: token + position embeddings, `layers` pre-LayerNorm transformer blocks,
// a final LayerNorm and a language-model head tied to the token embedding, trained with the
// fused softmax cross-entropy. GPT-2 initialisation: weights N(0, 0.02), the projections that
// feed the residual stream N(0, 0.02 / sqrt(2 layers)), position embeddings N(0, 0.01), biases 0,
// LayerNorm scale 1. Deterministic from the seed.
//
// Tensor parallelism (Megatron-LM's, over a tensor group of N ranks): every block's attention is
// split by heads and its MLP column then row (nn/block.hpp); the token embedding, which is also the
// head, is split by vocabulary (nn/vocab_parallel.hpp): rank r holds rows [r, r + 1) / N of the
// padded table, looks up its tokens (the position embedding added once, by rank 0 of the group),
// computes the logits of its ids only, and the cross-entropy combines the blocks with two small
// all-reduces, so the [B, T, V] logits are never gathered. The LayerNorms, wpe and the residual
// stream are whole on every rank. Each rank initialises its blocks to exactly the values one
// process makes, so N ranks compute the same model as one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/core/device_stager.hpp"
#include "loom/model/model.hpp"
#include "loom/nn/block.hpp"
#include "loom/nn/layernorm.hpp"
#include "loom/nn/vocab_parallel.hpp"

namespace loom::nn {

namespace detail {
class BufferPool;  // src/nn/buffer.hpp
}

struct GPTConfig {
  std::int64_t vocab_size = 256;
  std::int64_t context = 128;  // the longest sequence (rows of the position embedding)
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  std::int64_t channels = 128;
  // How the blocks run attention: an execution choice, not part of the architecture (checkpoints
  // do not record it; either kernel trains the same model).
  AttentionKernel attention = AttentionKernel::automatic;
  // Activation checkpointing, also an execution choice: blocks l with l % checkpoint_every == 0
  // use `checkpointing` (every block by default), the others keep their activations.
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  std::int64_t checkpoint_every = 1;
  bool checkpointed(std::int64_t block) const noexcept {
    return checkpointing != ActivationCheckpointing::none && block % checkpoint_every == 0;
  }
  ActivationCheckpointing checkpointing_of(std::int64_t block) const noexcept {
    return checkpointed(block) ? checkpointing : ActivationCheckpointing::none;
  }
  // The token embedding has padded_vocab() rows (a multiple of 64, for GEMM-friendly shapes);
  // the padded logits never take part in the loss. It does not depend on tensor parallelism (a
  // checkpoint's table has one shape at any TP): a tensor group of N ranks takes padded / N rows
  // each, so N must divide it (any power of two up to 64 does).
  std::int64_t padded_vocab() const noexcept { return (vocab_size + 63) / 64 * 64; }
  // Throws an invalid_argument Error naming the first bad field.
  void validate() const;
  std::int64_t parameter_count() const;
  // Multiply-adds x 2 of one forward + backward per token, counting the attention scores
  // (6N + 12 L C T, the PaLM / llm.c convention), for MFU: the model's FLOPs, whatever is recomputed.
  double training_flops_per_token(std::int64_t steps) const;
  // What activation checkpointing adds per token (hardware FLOPs = the two together): full
  // recomputes a checkpointed block's forward (24 C^2 + 4 C T), selective its attention scores
  // (Q K^T, 2 C T; the heads' output is kept; LayerNorm and GELU are no FLOPs a peak counts).
  double recompute_flops_per_token(std::int64_t steps) const;
};

// Its parameter space has one unit for the embeddings and the final LayerNorm (unit 0) and one per
// block (unit 1 + l), so the reverse of the space's order is the order backward finishes them.
class GPT final : public model::Model {
 public:
  // layout: what the parameter space allocates (shard::space_layout(stage, comm) for a ZeRO job,
  // so that a rank never holds more than its share); the default stores every value. tensor: the
  // tensor group the layers are split over (topo::DeviceMesh::tensor(); null: none), on `device`;
  // it must outlive the model, and heads and padded_vocab() must divide by its size.
  GPT(const GPTConfig& config, const Precision& precision, Device device, std::uint64_t seed = 1337,
      const model::SpaceLayout& layout = {}, comm::Communicator* tensor = nullptr);
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;
  ~GPT() override;

  // tokens: [B, T] i32 with T <= context. Computes the logits [B, T, padded_vocab] (a buffer of
  // the model) and, when targets ([B, T] i32, -1 = ignore) are given, the mean cross-entropy over
  // the counted positions, which it returns (NaN without targets). Activations are kept for
  // backward (a checkpointed block keeps less, and recomputes the rest: nn/block.hpp).
  float forward(const Tensor& tokens, const Tensor& targets = {}, StreamRef stream = {}) override;
  // The same without waiting: the mean loss is added to loss_sum[0] on the stream. Host batches are
  // range-checked on the host, so on a GPU nothing in the forward waits for the device.
  void forward_into(const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum,
                    StreamRef stream = {}) override;
  // Backpropagates loss_scale x the mean loss of the last forward (which needs targets).
  // Gradients are accumulated (+=): call zero_grad() between optimizer steps. Every parameter's
  // gradient-ready hooks run as soon as its gradient is final, in backward order.
  void backward(float loss_scale = 1.0f, StreamRef stream = {}) override;
  void zero_grad();

  // The last forward's logits [B, T, vocab_block().rows]: this rank's block of the padded
  // vocabulary's columns (all of them without tensor parallelism; after backward they may hold
  // the logits' gradient).
  const Tensor& logits() const noexcept { return logits_; }
  // The ids whose logits (and embedding rows) this rank holds.
  const VocabBlock& vocab_block() const noexcept { return vocab_; }
  comm::Communicator* tensor_group() const noexcept { return tensor_; }
  int tensor_ranks() const noexcept override { return tensor_ != nullptr ? tensor_->size() : 1; }
  int tensor_rank() const noexcept override { return tensor_ != nullptr ? tensor_->rank() : 0; }
  const GPTConfig& config() const noexcept { return config_; }
  const Precision& precision() const noexcept override { return precision_; }
  Device device() const noexcept override { return device_; }
  model::ParameterSpace& parameter_space() noexcept override { return *space_; }
  const model::ParameterSpace& parameter_space() const noexcept override { return *space_; }
  std::string architecture_name() const override { return "gpt"; }
  std::vector<std::pair<std::string, std::int64_t>> architecture() const override;
  // Unit 0 (wte, wpe, ln_f): the embedding starts forward and ends backward, and wte is the head.
  std::vector<std::size_t> root_units() const override { return {0}; }
  // Every parameter, in registration order (embeddings, blocks in order, final LayerNorm).
  const std::vector<Parameter*>& parameters() const noexcept { return parameters_; }

 private:
  void initialize(std::uint64_t seed);
  void run_forward(const Tensor& tokens, const Tensor& targets, StreamRef stream);

  void embed(StreamRef stream, bool tokens_checked);
  void head_backward(const Tensor& dlogits, StreamRef stream);

  GPTConfig config_;
  Precision precision_;
  Device device_;
  comm::Communicator* tensor_;
  VocabBlock vocab_;
  std::unique_ptr<VocabParallelCrossEntropy> split_loss_;  // under tensor parallelism
  std::unique_ptr<detail::BufferPool> pool_;  // the checkpointed blocks' buffers, shared between them
  Shape pooled_shape_;                         // the token shape the pooled buffers were made for
  Parameter wte_, wpe_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  LayerNorm ln_f_;
  std::vector<Parameter*> parameters_;
  std::unique_ptr<model::ParameterSpace> space_;

  Tensor staged_tokens_, staged_targets_;  // device copies of host batches, reused
  std::unique_ptr<DeviceStager> stager_;  // on a GPU: host batches up through page-locked memory
  Tensor tokens_, targets_, embedded_, final_norm_, logits_, losses_, dlosses_, dresidual_, loss_value_;
  std::int64_t counted_targets_ = 0;
};

}  // namespace loom::nn
