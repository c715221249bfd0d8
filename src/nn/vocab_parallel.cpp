#include "loom/nn/vocab_parallel.hpp"

#include <algorithm>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/vocab_parallel.hpp"
#include "src/nn/buffer.hpp"
#include "src/nn/loss_value.hpp"

namespace loom::nn {

VocabBlock vocab_block(std::int64_t vocab_size, std::int64_t padded_vocab, int rank, int ranks) {
  require(vocab_size >= 1 && padded_vocab >= vocab_size, "vocabulary-parallel: a padded vocabulary of ", padded_vocab,
          " cannot hold ", vocab_size, " ids");
  require(ranks >= 1 && rank >= 0 && rank < ranks && padded_vocab % ranks == 0, "vocabulary-parallel: the padded "
          "vocabulary of ", padded_vocab, " does not divide into ", ranks, " blocks (rank ", rank, ")");
  VocabBlock b;
  b.rows = padded_vocab / ranks;
  b.first = b.rows * rank;
  b.valid = std::clamp<std::int64_t>(vocab_size - b.first, 0, b.rows);
  return b;
}

namespace {

kernels::VocabShard shard_of(const VocabBlock& block, std::int64_t vocab_size, std::int64_t ignore_index) {
  return {.first = block.first, .valid = block.valid, .vocab_size = vocab_size, .ignore_index = ignore_index};
}

// all-reduce of t over the group, in place, ordered on `stream`.
void reduce_over(comm::Communicator& tensor, const Tensor& t, comm::ReduceOp op, StreamRef stream) {
  if (tensor.size() > 1) tensor.all_reduce(t, t, op, stream).wait_on(stream);
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const std::string& name, std::int64_t vocab_size,
                                               std::int64_t padded_vocab, std::int64_t channels,
                                               const Precision& precision, Device device, comm::Communicator& tensor)
    : vocab_size_(vocab_size),
      block_(vocab_block(vocab_size, padded_vocab, tensor.rank(), tensor.size())),
      tensor_(tensor),
      weight_(name, Shape{block_.rows, channels}, precision.storage, device, true) {
  require(tensor.device() == device, "'", name, "': the tensor group is on ", tensor.device(), " but the layer on ",
          device);
  weight_.set_init(model::Init::normal(0.02f));
  weight_.set_partition({Shape{padded_vocab, channels}, {block_.first, 0}, false});
}

Tensor VocabParallelEmbedding::forward(const Tensor& tokens, StreamRef stream) {
  detail::require_storage(weight_);
  require(tokens.defined() && tokens.rank() == 2, "'", weight_.name(), "': tokens must be [B, T] i32, got ", tokens);
  tokens_ = tokens;
  detail::ensure_buffer(output_, {tokens.size(0), tokens.size(1), weight_.shape()[1]}, weight_.dtype(),
                        weight_.device());
  kernels::vocab_parallel_embedding_forward(tokens, weight_.value(), Tensor(), output_, shard_of(block_, vocab_size_, -1),
                                            stream);
  reduce_over(tensor_, output_, comm::ReduceOp::sum, stream);  // one rank's row, zeros elsewhere: exact
  return output_;
}

void VocabParallelEmbedding::backward(const Tensor& dout, StreamRef stream) {
  require(tokens_.defined(), "'", weight_.name(), "': backward before forward");
  detail::require_grad_storage(weight_);
  kernels::vocab_parallel_embedding_backward(tokens_, dout, weight_.grad(), Tensor(), shard_of(block_, vocab_size_, -1),
                                             stream);
  weight_.mark_grad_ready(stream);
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(std::int64_t vocab_size, const VocabBlock& block,
                                                     comm::Communicator& tensor, std::int64_t ignore_index)
    : vocab_size_(vocab_size), ignore_index_(ignore_index), block_(block), tensor_(tensor) {}

float VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& targets, StreamRef stream) {
  return detail::loss_value(*this, value_, logits, targets, stream);
}

void VocabParallelCrossEntropy::forward_into(const Tensor& logits, const Tensor& targets, const Tensor& loss_sum,
                                             StreamRef stream) {
  require(logits.defined() && logits.rank() == 2 && logits.shape()[1] == block_.rows && logits.shape()[0] > 0,
          "vocabulary-parallel cross-entropy: logits must be [rows, ", block_.rows, "] (this rank's block), got ",
          logits);
  require(targets.defined() && targets.dtype() == DType::i32 && targets.shape() == Shape{logits.shape()[0]},
          "vocabulary-parallel cross-entropy: targets must be [", logits.shape()[0], "] i32 token ids, got ", targets);
  const std::vector<std::int32_t> host = targets.to_vector<std::int32_t>();
  counted_ = 0;
  for (std::size_t r = 0; r < host.size(); ++r) {
    if (host[r] == ignore_index_) continue;
    require(host[r] >= 0 && host[r] < vocab_size_, "vocabulary-parallel cross-entropy: the target of row ", r, " is ",
            host[r], ", outside the vocabulary [0, ", vocab_size_, ")");
    ++counted_;
  }
  const Device device = logits.device();
  const std::int64_t rows = logits.shape()[0];
  const kernels::VocabShard shard = shard_of(block_, vocab_size_, ignore_index_);
  targets_ = detail::on_device(targets, staged_targets_, device, stream);
  logits_ = logits;
  detail::ensure_buffer(row_max_, {rows}, DType::f32, device);
  detail::ensure_buffer(partial_, {rows, 2}, DType::f32, device);
  detail::ensure_buffer(losses_, {rows}, DType::f32, device);
  kernels::vocab_parallel_max(logits_, row_max_, shard, stream);
  reduce_over(tensor_, row_max_, comm::ReduceOp::max, stream);
  kernels::vocab_parallel_sum_exp(logits_, targets_, row_max_, partial_, shard, stream);
  reduce_over(tensor_, partial_, comm::ReduceOp::sum, stream);
  kernels::vocab_parallel_loss(targets_, row_max_, partial_, losses_, shard, stream);
  kernels::accumulate_mean(losses_, counted_ > 0 ? static_cast<double>(counted_) : 1.0, loss_sum, stream);
  ready_ = true;
}

Tensor VocabParallelCrossEntropy::backward(float loss_scale, StreamRef stream) {
  require(ready_, "vocabulary-parallel cross-entropy: backward needs a forward first (each forward allows one backward)");
  ready_ = false;
  const Device device = logits_.device();
  detail::ensure_buffer(dlosses_, {logits_.shape()[0]}, DType::f32, device);
  fill(dlosses_, counted_ > 0 ? static_cast<double>(loss_scale) / static_cast<double>(counted_) : 0.0, stream);
  detail::ensure_buffer(gradient_, logits_.shape(), logits_.dtype(), device);
  kernels::vocab_parallel_backward(logits_, targets_, row_max_, partial_, dlosses_, gradient_,
                                   shard_of(block_, vocab_size_, ignore_index_), stream);
  logits_ = Tensor();
  return gradient_;
}

}  // namespace loom::nn
