#include "loom/nn/gpt.hpp"

#include <cmath>
#include <optional>
#include <span>
#include <string>

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"
#include "loom/kernels/cast.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "loom/kernels/embedding.hpp"
#include "loom/kernels/gemm.hpp"
#include "loom/kernels/vocab_parallel.hpp"
#include "src/nn/buffer.hpp"

namespace loom::nn {

using kernels::GemmOptions;
using kernels::StridedMatrix;

void GPTConfig::validate() const {
  auto positive = [](const char* field, std::int64_t value) {
    require(value > 0, "GPT config: ", field, " must be positive, got ", value);
  };
  positive("vocab_size", vocab_size);
  positive("context", context);
  positive("layers", layers);
  positive("heads", heads);
  positive("channels", channels);
  require(channels % heads == 0, "GPT config: channels ", channels, " must be a multiple of heads ", heads);
  positive("checkpoint_every", checkpoint_every);
}

std::int64_t GPTConfig::parameter_count() const {
  const std::int64_t c = channels;
  const std::int64_t per_block = 2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) +
                                 (4 * c * c + c);
  return padded_vocab() * c + context * c + layers * per_block + 2 * c;
}

double GPTConfig::training_flops_per_token(std::int64_t steps) const {
  return 6.0 * static_cast<double>(parameter_count()) +
         12.0 * static_cast<double>(layers * channels * steps);
}

double GPTConfig::recompute_flops_per_token(std::int64_t steps) const {
  std::int64_t blocks = 0;
  for (std::int64_t l = 0; l < layers; ++l) blocks += checkpointed(l) ? 1 : 0;
  const double c = static_cast<double>(channels), t = static_cast<double>(steps), n = static_cast<double>(blocks);
  switch (checkpointing) {
    case ActivationCheckpointing::full: return n * (24 * c * c + 4 * c * t);
    case ActivationCheckpointing::selective: return n * 2 * c * t;
    case ActivationCheckpointing::none: return 0;
  }
  return 0;
}

namespace {

// A tensor group of one rank is no tensor parallelism.
comm::Communicator* split_over(comm::Communicator* tensor) {
  return tensor != nullptr && tensor->size() > 1 ? tensor : nullptr;
}

VocabBlock block_of(const GPTConfig& config, const comm::Communicator* tensor) {  // (config validated)
  return tensor == nullptr ? VocabBlock{0, config.padded_vocab(), config.vocab_size}
                           : vocab_block(config.vocab_size, config.padded_vocab(), tensor->rank(), tensor->size());
}

}  // namespace

GPT::GPT(const GPTConfig& config, const Precision& precision, Device device, std::uint64_t seed,
         const model::SpaceLayout& layout, comm::Communicator* tensor)
    : config_((config.validate(), precision.validate(), config)),
      precision_(precision),
      device_(device),
      tensor_(split_over(tensor)),
      vocab_(block_of(config, tensor_)),
      wte_("wte", Shape{vocab_.rows, config.channels}, precision.storage, device, true),
      wpe_("wpe", Shape{config.context, config.channels}, precision.storage, device, true),
      ln_f_("ln_f", config.channels, precision, device) {
  if (tensor_ != nullptr) {
    require(tensor_->device() == device, "GPT: the tensor group is on ", tensor_->device(), " but the model on ",
            device);
    wte_.set_partition({Shape{config.padded_vocab(), config.channels}, {vocab_.first, 0}, false});
    split_loss_ = std::make_unique<VocabParallelCrossEntropy>(config.vocab_size, vocab_, *tensor_);
  }
  if (config_.checkpointing != ActivationCheckpointing::none) pool_ = std::make_unique<detail::BufferPool>();
  parameters_ = {&wte_, &wpe_};
  for (std::int64_t l = 0; l < config.layers; ++l) {
    std::string name = "h";  // (not "h" + to_string: GCC 12 warns falsely about that, -Wrestrict)
    name += std::to_string(l);
    blocks_.push_back(std::make_unique<TransformerBlock>(name, config.channels, config.heads, precision, device,
                                                         config.attention, tensor_));
    blocks_.back()->collect_parameters(parameters_);
  }
  ln_f_.collect_parameters(parameters_);
  std::vector<model::UnitSpec> units{{"embeddings", {&wte_, &wpe_}}};
  ln_f_.collect_parameters(units[0].parameters);
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    std::string name = "h";
    name += std::to_string(l);
    units.push_back({std::move(name), {}});
    blocks_[l]->collect_parameters(units.back().parameters);
  }
  // Every parameter is a description so far: the space allocates what the layout keeps, and each
  // rank initialises only what it stores.
  space_ = std::make_unique<model::ParameterSpace>(std::move(units), layout);
  initialize(seed);
}

GPT::~GPT() = default;

std::vector<std::pair<std::string, std::int64_t>> GPT::architecture() const {
  return {{"vocab_size", config_.vocab_size}, {"context", config_.context}, {"layers", config_.layers},
          {"heads", config_.heads}, {"channels", config_.channels}};
}

void GPT::initialize(std::uint64_t seed) {
  // GPT-2's scheme: N(0, 0.02) weights (residual projections scaled by 1/sqrt(2 layers)), wpe
  // N(0, 0.01), biases zero and LayerNorm scales one (as built). The values come from (seed, the
  // parameter's name, element index) alone (model/init.hpp), so a rank holding a shard can make
  // exactly its part.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config_.layers));
  for (Parameter* p : parameters_) {
    const std::string& name = p->name();
    const bool is_weight = name.ends_with(".weight") && p->shape().rank() == 2;
    if (p == &wte_) p->set_init(model::Init::normal(0.02f));
    else if (p == &wpe_) p->set_init(model::Init::normal(0.01f));
    else if (is_weight) p->set_init(model::Init::normal(name.ends_with("proj.weight") ? residual_std : 0.02f));
  }
  space_->initialize(seed);
}

namespace {

// Every element of a host index tensor lies in [0, limit) or equals `allowed`; otherwise an
// invalid_argument Error names the value and its (sequence, step). Device tensors are left to the
// kernels' own (synchronizing) checks.
bool check_on_host(const Tensor& indices, std::int64_t limit, std::optional<std::int32_t> allowed, const char* what) {
  if (!indices.device().is_cpu()) return false;
  const std::int64_t steps = indices.shape()[1];
  const std::span<const std::int32_t> values = indices.span<std::int32_t>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int32_t v = values[i];
    if ((v < 0 || v >= limit) && !(allowed && v == *allowed)) {
      const auto at = static_cast<std::int64_t>(i);
      fail(ErrorCategory::invalid_argument, "GPT: ", what, " ", v, " at position (", at / steps, ", ", at % steps,
           ") is outside the vocabulary [0, ", limit, ")");
    }
  }
  return true;
}

}  // namespace

void GPT::run_forward(const Tensor& tokens, const Tensor& targets, StreamRef stream) {
  require(tokens.defined() && tokens.dtype() == DType::i32 && tokens.shape().rank() == 2, "GPT: tokens must be [B, T] "
          "i32, got ", tokens);
  const std::int64_t batch = tokens.shape()[0], steps = tokens.shape()[1];
  require(steps >= 1 && steps <= config_.context, "GPT: sequence length ", steps, " is outside [1, context = ",
          config_.context, "]");
  if (targets.defined()) {
    require(targets.dtype() == DType::i32 && targets.shape() == tokens.shape(), "GPT: targets must be i32 shaped like "
            "the tokens ", tokens.shape(), ", got ", targets);
  }
  // Host batches are checked here, so the kernels need not check them on the GPU (which waits).
  const kernels::CrossEntropyOptions defaults;
  const bool tokens_checked = check_on_host(tokens, config_.vocab_size, std::nullopt, "token");
  const bool targets_checked =
      targets.defined() && check_on_host(targets, config_.vocab_size, static_cast<std::int32_t>(defaults.ignore_index),
                                         "target");
  Tensor staged_targets;
  if (device_.is_cuda() && tokens.device().is_cpu() && targets.defined() && targets.device().is_cpu()) {
    // A training or evaluation batch (its shape fixed) goes up through page-locked memory on the
    // stager's stream (core/device_stager.hpp); generate()'s growing window takes the plain copy.
    if (!stager_) stager_ = std::make_unique<DeviceStager>(device_);
    const std::vector<Tensor> staged = stager_->stage({tokens, targets}, stream);
    tokens_ = staged[0];
    staged_targets = staged[1];
  } else {
    tokens_ = detail::on_device(tokens, staged_tokens_, device_, stream);
  }
  const std::int64_t c = config_.channels, vp = vocab_.rows, rows = batch * steps;
  const detail::PoolScope pooled(pool_.get());  // (null without checkpointing: layers allocate as before)
  if (pool_ && tokens.shape() != pooled_shape_) {
    // Buffers of another batch shape (generate's growing window, an evaluation batch) would never
    // be taken again: let them go rather than keep one block's worth per shape.
    pool_->clear();
    pooled_shape_ = tokens.shape();
  }
  detail::ensure_buffer(embedded_, {batch, steps, c}, precision_.storage, device_);
  before_forward(0, stream);
  embed(stream, tokens_checked);
  Tensor x = embedded_;
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    before_forward(1 + l, stream);
    x = blocks_[l]->forward(x, stream);
    blocks_[l]->release_activations(config_.checkpointing_of(static_cast<std::int64_t>(l)));
    after_forward(1 + l, stream);
  }
  final_norm_ = ln_f_.forward(x, stream);
  // logits = ln_f(x) wte^T over the padded vocabulary (this rank's block of it).
  detail::ensure_buffer(logits_, {batch, steps, vp}, precision_.storage, device_);
  GemmOptions head;
  head.trans_b = true;
  head.precision = precision_.gemm;
  kernels::gemm(detail::as_rows(final_norm_), wte_.value(), logits_.view({rows, vp}), head, stream);
  after_forward(0, stream);
  if (!targets.defined()) {
    targets_ = Tensor();
    return;
  }
  targets_ = staged_targets.defined() ? staged_targets : detail::on_device(targets, staged_targets_, device_, stream);
  if (split_loss_) return;  // forward_into combines the blocks' losses
  detail::ensure_buffer(losses_, {rows}, DType::f32, device_);
  kernels::CrossEntropyOptions ce;
  ce.vocab_size = config_.vocab_size;
  ce.targets = targets_checked ? kernels::IndexCheck::trusted : kernels::IndexCheck::checked;
  kernels::cross_entropy_forward(logits_.view({rows, vp}), targets_.view({rows}), losses_, ce, stream);
  // The positions that count (the host copy when there is one; a device batch is read back).
  const std::vector<std::int32_t> host_targets =
      targets.device().is_cpu() ? std::vector<std::int32_t>() : targets.to_vector<std::int32_t>();
  const std::span<const std::int32_t> counted =
      targets.device().is_cpu() ? targets.span<std::int32_t>() : std::span<const std::int32_t>(host_targets);
  counted_targets_ = 0;
  for (const std::int32_t t : counted) counted_targets_ += t != ce.ignore_index ? 1 : 0;
}

float GPT::forward(const Tensor& tokens, const Tensor& targets, StreamRef stream) {
  if (!targets.defined()) {
    run_forward(tokens, targets, stream);
    return std::nanf("");
  }
  detail::ensure_buffer(loss_value_, {1}, DType::f32, device_);
  fill(loss_value_, 0.0, stream);
  forward_into(tokens, targets, loss_value_, stream);
  synchronize(stream);
  return loss_value_.to(Device::cpu()).item<float>();
}

void GPT::forward_into(const Tensor& tokens, const Tensor& targets, const Tensor& loss_sum, StreamRef stream) {
  require(targets.defined(), "GPT: forward_into needs targets (the loss is what it adds)");
  run_forward(tokens, targets, stream);
  if (split_loss_) {
    // The caller's targets: a host batch is counted there without waiting, a device one is read in
    // stream order by the loss itself.
    const std::int64_t rows = tokens_.numel();
    split_loss_->forward_into(logits_.view({rows, vocab_.rows}), targets.view({rows}), loss_sum, stream);
    return;
  }
  // The mean over counted positions (ignored ones hold loss 0), summed in double.
  kernels::accumulate_mean(losses_, counted_targets_ > 0 ? static_cast<double>(counted_targets_) : 1.0, loss_sum,
                           stream);
}

void GPT::embed(StreamRef stream, bool tokens_checked) {
  detail::require_storage(wte_);
  if (tensor_ == nullptr) {
    kernels::embedding_forward(tokens_, wte_.value(), wpe_.value(), embedded_, stream,
                               tokens_checked ? kernels::IndexCheck::trusted : kernels::IndexCheck::checked);
    return;
  }
  // This rank's rows for its tokens, zeros for the others, and wpe on rank 0 alone: the sum over
  // the group is the whole lookup plus wpe, rounded once as embedding_forward rounds it.
  const kernels::VocabShard shard{.first = vocab_.first, .valid = vocab_.valid, .vocab_size = config_.vocab_size};
  kernels::vocab_parallel_embedding_forward(tokens_, wte_.value(), tensor_->rank() == 0 ? wpe_.value() : Tensor(),
                                            embedded_, shard, stream,
                                            tokens_checked ? kernels::IndexCheck::trusted : kernels::IndexCheck::checked);
  tensor_->all_reduce(embedded_, embedded_, comm::ReduceOp::sum, stream).wait_on(stream);
}

void GPT::backward(float loss_scale, StreamRef stream) {
  require(targets_.defined(), "GPT: backward needs a forward with targets first");
  const detail::PoolScope pooled(pool_.get());
  before_backward(0, stream);
  detail::require_grad_storage(wte_);
  const std::int64_t rows = tokens_.numel(), vp = vocab_.rows;
  const Tensor logits_rows = logits_.view({rows, vp});
  if (split_loss_) {
    head_backward(split_loss_->backward(loss_scale, stream), stream);
  } else {
    // d(mean loss)/d(loss_i) = 1 / counted for every counted row; ignored rows get 0 in the kernel.
    detail::ensure_buffer(dlosses_, {rows}, DType::f32, device_);
    const double per_row = counted_targets_ > 0 ? static_cast<double>(loss_scale) / counted_targets_ : 0.0;
    fill(dlosses_, per_row, stream);
    kernels::CrossEntropyOptions ce;
    ce.vocab_size = config_.vocab_size;
    kernels::cross_entropy_backward(logits_rows, targets_.view({rows}), dlosses_, logits_rows, ce, stream);
    head_backward(logits_rows, stream);
  }
  Tensor d = ln_f_.backward(dresidual_, stream);
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    before_backward(1 + l, stream);  // (under ZeRO-3 this gathers the values the recomputation needs)
    const ActivationCheckpointing mode = config_.checkpointing_of(static_cast<std::int64_t>(l));
    blocks_[l]->recompute(mode, stream);
    d = blocks_[l]->backward(d, stream);
    // (its dx, which d still holds, stays out of the pool until the block before has read it)
    if (mode != ActivationCheckpointing::none) blocks_[l]->release_activations(ActivationCheckpointing::full);
    after_backward(1 + l, stream);
  }
  if (tensor_ == nullptr) {
    kernels::embedding_backward(tokens_, d, wte_.grad(), wpe_.grad(), stream);
  } else {
    const kernels::VocabShard shard{.first = vocab_.first, .valid = vocab_.valid, .vocab_size = config_.vocab_size};
    kernels::vocab_parallel_embedding_backward(tokens_, d, wte_.grad(), wpe_.grad(), shard, stream);
  }
  wpe_.mark_grad_ready(stream);
  wte_.mark_grad_ready(stream);  // tied: final only after both the head and the embedding
  after_backward(0, stream);
  targets_ = Tensor();     // the logits now hold their gradient: another backward needs a forward
}

void GPT::head_backward(const Tensor& dlogits, StreamRef stream) {
  // dwte += dlogits^T ln_f(x); d ln_f(x) = dlogits wte (under tensor parallelism the sum of every
  // rank's part: all-reduced, Megatron's f for the head).
  const std::int64_t rows = tokens_.numel();
  GemmOptions dw;
  dw.trans_a = true;
  dw.beta = 1.0f;
  dw.precision = precision_.gemm;
  const StridedMatrix grad_wte = StridedMatrix::of(wte_.grad());
  kernels::gemm(StridedMatrix::of(dlogits), StridedMatrix::of(detail::as_rows(final_norm_)), grad_wte, grad_wte, dw,
                stream);
  detail::ensure_buffer(dresidual_, final_norm_.shape(), precision_.storage, device_);
  GemmOptions dx;
  dx.precision = precision_.gemm;
  kernels::gemm(dlogits, wte_.value(), dresidual_.view({rows, config_.channels}), dx, stream);
  if (tensor_ != nullptr) tensor_->all_reduce(dresidual_, dresidual_, comm::ReduceOp::sum, stream).wait_on(stream);
}

void GPT::zero_grad() { space_->zero_grads(); }

}  // namespace loom::nn
