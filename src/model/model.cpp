#include "loom/model/model.hpp"

#include "loom/core/error.hpp"
#include "loom/core/tensor_ops.hpp"

namespace loom::model {

void Model::forward_into(const Tensor& inputs, const Tensor& targets, const Tensor& loss_sum, StreamRef stream) {
  require(loss_sum.defined() && loss_sum.dtype() == DType::f32 && loss_sum.numel() == 1,
          "Model::forward_into: loss_sum must be a [1] f32 tensor, got ", loss_sum);
  const float loss = forward(inputs, targets, stream);
  synchronize(stream);
  const Tensor host = loss_sum.to(Device::cpu());
  host.data<float>()[0] += loss;
  copy(loss_sum, host, stream);
  synchronize(stream);
}

}  // namespace loom::model
