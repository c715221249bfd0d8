#include "loom/nn/tensor_parallel.hpp"

#include "loom/core/error.hpp"
#include "loom/kernels/elementwise.hpp"
#include "loom/kernels/gemm.hpp"
#include "src/nn/buffer.hpp"
#include "src/nn/linear_backward.hpp"

namespace loom::nn {

using kernels::GemmOptions;
using kernels::StridedMatrix;

namespace {

int ranks_of(const comm::Communicator* tensor) { return tensor != nullptr ? tensor->size() : 1; }

// The block [size r / N, size (r + 1) / N) of a dimension split over the group; it must divide.
std::int64_t block_of(const std::string& name, const char* what, std::int64_t size, const comm::Communicator* tensor) {
  const int ranks = ranks_of(tensor);
  require(size % ranks == 0, "'", name, "': ", what, " ", size, " do not divide over the ", ranks,
          " ranks of the tensor group");
  return size / ranks;
}

void require_device(const std::string& name, const comm::Communicator* tensor, Device device) {
  require(tensor == nullptr || tensor->device() == device, "'", name, "': the tensor group is on ",
          tensor != nullptr ? tensor->device() : device, " but the layer on ", device);
}

// all-reduce (sum) of t over the group, in place, ordered on `stream`.
void sum_over(comm::Communicator* tensor, const Tensor& t, StreamRef stream) {
  if (ranks_of(tensor) > 1) tensor->all_reduce(t, t, comm::ReduceOp::sum, stream).wait_on(stream);
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const std::string& name, std::int64_t in_features,
                                           std::int64_t out_features, LinearOptions options,
                                           const Precision& precision, Device device, comm::Communicator* tensor,
                                           std::int64_t stack)
    : out_(out_features),
      ranks_(ranks_of(tensor)),
      tensor_(tensor),
      local_(name, in_features, block_of(name, "output features", out_features, tensor), options, precision, device) {
  require_device(name, tensor, device);
  require(stack >= 1 && out_features % (stack * ranks_) == 0, "'", name, "': ", out_features, " output features in ",
          stack, " stacked part(s) do not divide over the ", ranks_, " ranks of the tensor group");
  if (ranks_ == 1) return;
  // Rank r's rows of each stacked part (one part: its block of the whole).
  const std::int64_t first = out_features / stack / ranks_ * tensor->rank();
  local_.weight().set_partition({Shape{out_features, in_features}, {first, 0}, false, stack});
  if (local_.bias() != nullptr) local_.bias()->set_partition({Shape{out_features}, {first}, false, stack});
}

Tensor ColumnParallelLinear::forward(const Tensor& x, StreamRef stream) { return local_.forward(x, stream); }

Tensor ColumnParallelLinear::backward(const Tensor& dy, StreamRef stream) {
  const Tensor dx = local_.backward(dy, stream);  // this rank's block's part of dx
  sum_over(tensor_, dx, stream);
  return dx;
}

RowParallelLinear::RowParallelLinear(const std::string& name, std::int64_t in_features, std::int64_t out_features,
                                     bool bias, const Precision& precision, Device device, comm::Communicator* tensor)
    : in_(in_features), out_(out_features), ranks_(ranks_of(tensor)), tensor_(tensor), precision_(precision) {
  require_device(name, tensor, device);
  if (ranks_ == 1) {
    single_ = std::make_unique<Linear>(name, in_features, out_features, LinearOptions{.bias = bias}, precision, device);
    return;
  }
  weight_ = std::make_unique<Parameter>(name + ".weight",
                                        Shape{out_features, block_of(name, "input features", in_features, tensor)},
                                        precision.storage, device, true);
  weight_->set_init(model::Init::normal(0.02f));
  weight_->set_partition({Shape{out_features, in_features}, {0, in_features / ranks_ * tensor->rank()}, false});
  if (bias) {
    // Whole on every rank (replicated: each computes the same gradient), added once after the sum.
    bias_ = std::make_unique<Parameter>(name + ".bias", Shape{out_features}, precision.storage, device, false);
    bias_->set_init(model::Init::zeros());
  }
}

void RowParallelLinear::collect_parameters(std::vector<Parameter*>& out) {
  if (single_) {
    single_->collect_parameters(out);
    return;
  }
  out.push_back(weight_.get());
  if (bias_) out.push_back(bias_.get());
}

void RowParallelLinear::release_activations() {
  if (single_) single_->release_activations();
  input_ = Tensor();  // (a handle on the layer before's buffer: dropped, not pooled)
  for (Tensor* t : {&output_, &dx_, &bias_grad_scratch_}) detail::release(*t);  // (ones_: a tiny constant, kept)
}

void RowParallelLinear::release_output() {
  if (single_) single_->release_output();
  detail::release(output_);
}

void RowParallelLinear::release_input() {
  if (single_) single_->release_input();
  input_ = Tensor();
}

void RowParallelLinear::restore_input(const Tensor& x) {
  if (single_) {
    single_->restore_input(x);
    return;
  }
  require(x.defined() && x.shape()[-1] == in_ / ranks_, "RowParallelLinear '", weight_->name(),
          "': restored input must end in ", in_ / ranks_, " features, got ", x);
  input_ = detail::as_rows(x);
}

Tensor RowParallelLinear::forward(const Tensor& x, StreamRef stream) {
  if (single_) return single_->forward(x, stream);
  const std::int64_t local_in = in_ / ranks_;
  require(x.defined() && x.shape().rank() >= 1 && x.shape()[-1] == local_in, "RowParallelLinear '", weight_->name(),
          "': input must end in this rank's ", local_in, " of ", in_, " features, got ", x);
  detail::require_storage(*weight_);
  if (bias_) detail::require_storage(*bias_);
  input_ = detail::as_rows(x);
  const std::int64_t rows = input_.shape()[0];
  const Device device = weight_->device();
  detail::ensure_buffer(output_, {rows, out_}, precision_.storage, device);
  GemmOptions partial;
  partial.trans_b = true;
  partial.precision = precision_.gemm;
  kernels::gemm(input_, weight_->value(), output_, partial, stream);
  sum_over(tensor_, output_, stream);
  if (bias_) {
    // y += ones [rows, 1] x bias [1, out]: 1 * b is exact, and the sum with y is rounded once, as
    // a bias epilogue rounds it (fp32 multiplies for f32, so that TF32 does not round the bias).
    if (!ones_.defined() || ones_.shape() != Shape{rows, 1} || ones_.device() != device) {
      ones_ = Tensor::full({rows, 1}, precision_.storage, 1.0, device);
    }
    GemmOptions add;
    add.beta = 1.0f;
    add.precision = precision_.storage == DType::f32 ? kernels::GemmPrecision::fp32 : precision_.gemm;
    kernels::gemm(ones_, bias_->value().view({1, out_}), output_, add, stream);
  }
  return output_.view(detail::with_last(x.shape(), out_));
}

Tensor RowParallelLinear::backward(const Tensor& dy, StreamRef stream) {
  if (single_) return single_->backward(dy, stream);
  require(input_.defined(), "RowParallelLinear '", weight_->name(), "': backward before forward");
  detail::require_grad_storage(*weight_);
  if (bias_) detail::require_grad_storage(*bias_);
  const Tensor dy_rows = detail::as_rows(dy);
  require(dy_rows.shape() == Shape{input_.shape()[0], out_}, "RowParallelLinear '", weight_->name(), "': dy ", dy,
          " does not match the forward output [", input_.shape()[0], ", ", out_, "]");
  // dW_r += dy^T x_r, db += the sum of dy over rows, dx_r = dy W_r.
  detail::linear_backward(dy_rows, input_, *weight_, bias_.get(), bias_grad_scratch_, dx_, precision_, stream);
  return dx_.view(detail::with_last(dy.shape(), in_ / ranks_));
}

}  // namespace loom::nn
