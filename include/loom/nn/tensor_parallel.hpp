// Megatron-LM's tensor-parallel linear layers: one Linear split over the N ranks of a tensor group
// (topo::DeviceMesh::tensor()), each rank holding one block of the weight, with the communication
// pairs that make the blocks compute the whole layer:
//
//   ColumnParallelLinear  W [out, in] split by rows: rank r holds rows [out r / N, out (r + 1) / N)
//                         and the same part of the bias. Forward: y_r = x W_r^T + b_r from the whole
//                         input, the output left split (identity); backward: dx is the all-reduced
//                         sum of every rank's dy_r W_r (Megatron's f).
//   RowParallelLinear     W split by columns: rank r holds columns [in r / N, in (r + 1) / N) and
//                         takes that part of its input (what a column-parallel layer before it
//                         left). Forward: y = all-reduce(x_r W_r^T) + b, the whole bias added once,
//                         after the sum (Megatron's g); backward: dx_r = dy W_r from the whole dy,
//                         and db = the sum of dy over rows (the bias is replicated: every rank
//                         computes the same).
//
// An MLP is column then row: one all-reduce forward, one backward. Parameters keep Linear's names
// ("<name>.weight", "<name>.bias") and declare their box of the global tensor (model::Partition),
// so a model initialised from a seed holds, on each rank, exactly that block of the weights one
// process makes (model/init.hpp), and checkpoints store the blocks as pieces of the whole tensor.
// A column-parallel layer can split a fused weight of `stack` stacked parts (attention's QKV: 3)
// in each part: rank r then holds rows [r, r + 1) / N of q, of k and of v, one after the other,
// so its outputs are its heads' q, k and v.
//
// The tensor group is a pointer: null (or a group of one) is no tensor parallelism, and then both
// are exactly nn::Linear (the same parameters, kernels and bits). The split dimension (of each
// stacked part) must divide by N.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.hpp"
#include "loom/core/stream.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/parameter.hpp"
#include "loom/nn/precision.hpp"

namespace loom::nn {

class ColumnParallelLinear {
 public:
  // tensor: the tensor group (on the layer's device; null: none); it must outlive the layer.
  // options.gelu applies to this rank's block of outputs (elementwise: the same as on the whole).
  ColumnParallelLinear(const std::string& name, std::int64_t in_features, std::int64_t out_features,
                       LinearOptions options, const Precision& precision, Device device, comm::Communicator* tensor,
                       std::int64_t stack = 1);

  // x: [..., in], the same on every rank. Returns [..., out / N]: this rank's block of outputs.
  Tensor forward(const Tensor& x, StreamRef stream = {});
  // dy: [..., out / N]. Returns the whole dx [..., in] (all-reduced over the group).
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  Parameter& weight() noexcept { return local_.weight(); }
  Parameter* bias() noexcept { return local_.bias(); }
  void collect_parameters(std::vector<Parameter*>& out) { local_.collect_parameters(out); }
  void release_activations() { local_.release_activations(); }  // (see Linear)
  // Selective recomputation (see Linear): nothing here needs the group.
  void release_input() { local_.release_input(); }
  void restore_input(const Tensor& x) { local_.restore_input(x); }
  bool gelu_recomputable() const noexcept { return local_.gelu_recomputable(); }
  void release_gelu_output() { local_.release_gelu_output(); }
  Tensor recompute_gelu_output(StreamRef stream = {}) { return local_.recompute_gelu_output(stream); }
  std::int64_t local_out_features() const noexcept { return out_ / ranks_; }

 private:
  std::int64_t out_;
  int ranks_;
  comm::Communicator* tensor_;
  Linear local_;  // the rank's block: [out / N, in]
};

class RowParallelLinear {
 public:
  RowParallelLinear(const std::string& name, std::int64_t in_features, std::int64_t out_features, bool bias,
                    const Precision& precision, Device device, comm::Communicator* tensor);

  // x: [..., in / N], this rank's block of inputs. Returns the whole y [..., out], the same on
  // every rank (a buffer of this layer, valid until the next forward).
  Tensor forward(const Tensor& x, StreamRef stream = {});
  // dy: [..., out], the same on every rank. Returns this rank's block of dx [..., in / N].
  Tensor backward(const Tensor& dy, StreamRef stream = {});

  Parameter& weight() noexcept { return single_ ? single_->weight() : *weight_; }
  Parameter* bias() noexcept { return single_ ? single_->bias() : bias_.get(); }
  void collect_parameters(std::vector<Parameter*>& out);
  void release_activations();  // (see Linear)
  void release_output();       // selective recomputation (see Linear)
  void release_input();
  void restore_input(const Tensor& x);
  std::int64_t local_in_features() const noexcept { return in_ / ranks_; }

 private:
  std::int64_t in_, out_;
  int ranks_;
  comm::Communicator* tensor_;
  Precision precision_;
  std::unique_ptr<Linear> single_;     // N = 1: the whole layer
  std::unique_ptr<Parameter> weight_;  // N > 1: [out, in / N]
  std::unique_ptr<Parameter> bias_;    //        the whole bias, added after the sum
  Tensor input_, output_, ones_, dx_, bias_grad_scratch_;
};

}  // namespace loom::nn
