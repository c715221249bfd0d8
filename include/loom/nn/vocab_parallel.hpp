// The token embedding and the cross-entropy with the vocabulary split over a tensor group
// (Megatron-LM's; kernels/vocab_parallel.hpp), so that no rank holds the whole [V, C] table or
// the whole [rows, V] logits. The padded vocabulary is cut into N equal blocks of ids; block r
// (rank r of the group) holds ids [first, first + rows), of which `valid` are real ids (the last
// blocks may hold padding only past the real vocabulary).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/nn/precision.hpp"

namespace loom::nn {

struct VocabBlock {
  std::int64_t first = 0;  // the first token id of the block
  std::int64_t rows = 0;   // ids in the block (padded_vocab / N)
  std::int64_t valid = 0;  // of which real (below vocab_size)
};
// Block `rank` of `ranks` of a padded vocabulary; padded_vocab must divide by ranks and be at
// least vocab_size (an invalid_argument Error otherwise).
VocabBlock vocab_block(std::int64_t vocab_size, std::int64_t padded_vocab, int rank, int ranks);

// Token embedding: rank r holds rows [first, first + rows) of the [padded_vocab, C] table as
// "<name>" with that box as its partition. forward returns the whole lookup on every rank (each
// rank's rows for its tokens, zeros for the others, summed over the group).
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(const std::string& name, std::int64_t vocab_size, std::int64_t padded_vocab,
                         std::int64_t channels, const Precision& precision, Device device, comm::Communicator& tensor);
  // tokens: [B, T] i32 in [0, vocab_size), on the layer's device. Returns [B, T, C] (a buffer of
  // the layer, valid until the next forward).
  Tensor forward(const Tensor& tokens, StreamRef stream = {});
  // dout: [B, T, C], the same on every rank. Adds this rank's rows' gradients (deterministic).
  void backward(const Tensor& dout, StreamRef stream = {});

  Parameter& weight() noexcept { return weight_; }
  const VocabBlock& block() const noexcept { return block_; }
  void collect_parameters(std::vector<Parameter*>& out) { out.push_back(&weight_); }

 private:
  std::int64_t vocab_size_;
  VocabBlock block_;
  comm::Communicator& tensor_;
  Parameter weight_;
  Tensor tokens_, output_;
};

// Cross-entropy from this rank's block of logits ([rows, block.rows], the columns of its ids): the
// mean over rows whose target is not ignore_index, the same on every rank, as nn::CrossEntropyLoss
// computes it from the whole logits. Two small all-reduces forward ([rows] and [rows, 2] f32),
// none backward.
class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(std::int64_t vocab_size, const VocabBlock& block, comm::Communicator& tensor,
                            std::int64_t ignore_index = -1);
  float forward(const Tensor& logits, const Tensor& targets, StreamRef stream = {});
  // Adds the mean to loss_sum ([1] f32 on the logits' device) in stream order, without waiting.
  void forward_into(const Tensor& logits, const Tensor& targets, const Tensor& loss_sum, StreamRef stream = {});
  // loss_scale x d(loss)/d(this rank's logits), in the logits' dtype (a buffer of the loss, valid
  // until the next backward); padding columns and ignored rows get 0.
  Tensor backward(float loss_scale = 1.0f, StreamRef stream = {});
  std::int64_t counted_rows() const noexcept { return counted_; }

 private:
  std::int64_t vocab_size_, ignore_index_;
  VocabBlock block_;
  comm::Communicator& tensor_;
  Tensor logits_, targets_, staged_targets_, row_max_, partial_, losses_, dlosses_, gradient_, value_;
  std::int64_t counted_ = 0;
  bool ready_ = false;
};

}  // namespace loom::nn
