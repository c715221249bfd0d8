// AdamW, SGD, gradient unscaling and the sum of squares on the GPU. The optimizers launch one
// grid-stride kernel per tensor; the sum of squares reduces each tensor into fixed per-block
// partials and then sums them in order, so its result is deterministic.
#include <cmath>
#include <vector>

#include "common.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;
constexpr unsigned reduce_blocks = 256;

template <class G, class M>
__global__ void adamw_kernel(float* p, const G* g, float* m, float* v, M* model, std::int64_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float bias1, float bias2, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float grad = to_f32(g[i]) * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    const float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] - decay * p[i] - lr * (mi / bias1) / (sqrtf(vi / bias2) + eps);
    p[i] = pi;
    if (model != nullptr) model[i] = from_f32<M>(pi);
  }
}

template <class G, class M>
__global__ void sgd_kernel(float* p, const G* g, float* buf, M* model, std::int64_t n, float lr, float momentum,
                           float dampening, float decay, bool nesterov, bool first_step, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float grad = to_f32(g[i]) * grad_scale + decay * p[i];
    if (buf != nullptr) {
      buf[i] = first_step ? grad : momentum * buf[i] + (1.0f - dampening) * grad;
      grad = nesterov ? grad + momentum * buf[i] : buf[i];
    }
    p[i] -= lr * grad;
    if (model != nullptr) model[i] = from_f32<M>(p[i]);
  }
}

template <class G>
__global__ void unscale_kernel(G* g, std::int64_t n, float scale, float* found_nonfinite) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const G stored = from_f32<G>(to_f32(g[i]) * scale);
    g[i] = stored;
    if (!isfinite(to_f32(stored))) *found_nonfinite = 1.0f;  // every writer writes the same value
  }
}

// partials[blockIdx.x] = sum of squares of the block's grid-stride share, in a fixed order.
template <class T>
__global__ void squares_partial_kernel(const T* x, std::int64_t n, float* partials) {
  float sum = 0.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_f32(x[i]);
    sum += v * v;
  }
  sum = block_reduce(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(const float* partials, std::int64_t count, float* out, bool take_sqrt) {
  float sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_reduce(sum);
  if (threadIdx.x == 0) out[0] = take_sqrt ? sqrtf(sum) : sum;
}

// Calls body.template operator()<M>() for the model copy's type (float when there is none).
template <class Body>
void visit_model_dtype(const Tensor& model, Body&& body) {
  if (!model.defined()) body.template operator()<float>();
  else visit_float_dtype(model.dtype(), body);
}

template <class M>
M* model_data(const Tensor& model) {
  return model.defined() ? device_data<M>(model) : nullptr;
}

}  // namespace

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hp, void* stream) {
  const auto t = static_cast<double>(hp.step);
  const auto bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), t));
  const auto bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), t));
  for (const AdamWTensor& tensor : tensors) {
    const std::int64_t n = tensor.param.numel();
    if (n == 0) continue;
    const DeviceGuard guard(tensor.param.device());
    const float decay = tensor.decay ? hp.lr * hp.weight_decay : 0.0f;
    visit_float_dtype(tensor.grad.dtype(), [&]<class G>() {
      visit_model_dtype(tensor.model, [&]<class M>() {
        adamw_kernel<G, M><<<grid_for(n, threads), threads, 0, as_stream(stream)>>>(
            device_data<float>(tensor.param), device_data<G>(tensor.grad), device_data<float>(tensor.m),
            device_data<float>(tensor.v), model_data<M>(tensor.model), n, hp.lr, hp.beta1, hp.beta2, hp.eps, decay,
            bias1, bias2, hp.grad_scale);
      });
    });
    check_launch("adamw_step");
  }
}

void sgd_step(std::span<const SgdTensor> tensors, const SgdHyperparameters& hp, void* stream) {
  for (const SgdTensor& tensor : tensors) {
    const std::int64_t n = tensor.param.numel();
    if (n == 0) continue;
    const DeviceGuard guard(tensor.param.device());
    float* buffer = hp.momentum != 0.0f ? device_data<float>(tensor.momentum_buffer) : nullptr;
    visit_float_dtype(tensor.grad.dtype(), [&]<class G>() {
      visit_model_dtype(tensor.model, [&]<class M>() {
        sgd_kernel<G, M><<<grid_for(n, threads), threads, 0, as_stream(stream)>>>(
            device_data<float>(tensor.param), device_data<G>(tensor.grad), buffer, model_data<M>(tensor.model), n,
            hp.lr, hp.momentum, hp.dampening, tensor.decay ? hp.weight_decay : 0.0f, hp.nesterov, hp.step == 1,
            hp.grad_scale);
      });
    });
    check_launch("sgd_step");
  }
}

void unscale_and_check_finite(std::span<const Tensor> grads, float scale, const Tensor& found_nonfinite, void* stream) {
  const DeviceGuard guard(found_nonfinite.device());
  for (const Tensor& grad : grads) {
    if (grad.numel() == 0) continue;
    visit_float_dtype(grad.dtype(), [&]<class G>() {
      unscale_kernel<G><<<grid_for(grad.numel(), threads), threads, 0, as_stream(stream)>>>(
          device_data<G>(grad), grad.numel(), scale, device_data<float>(found_nonfinite));
    });
    check_launch("unscale_and_check_finite");
  }
}

void sum_of_squares(std::span<const Tensor> tensors, const Tensor& out, bool sqrt_result, void* stream) {
  const DeviceGuard guard(out.device());
  const cudaStream_t s = as_stream(stream);
  const std::size_t count = std::max<std::size_t>(tensors.size(), 1) * reduce_blocks;
  const StreamScratch partials(count * sizeof(float), s);
  check(cudaMemsetAsync(partials.as<float>(), 0, count * sizeof(float), s), "cudaMemsetAsync");
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].numel() == 0) continue;
    visit_float_dtype(tensors[t].dtype(), [&]<class T>() {
      squares_partial_kernel<T><<<reduce_blocks, threads, 0, s>>>(device_data<T>(tensors[t]), tensors[t].numel(),
                                                                 partials.as<float>() + t * reduce_blocks);
    });
  }
  sum_partials_kernel<<<1, 1024, 0, s>>>(partials.as<float>(), static_cast<std::int64_t>(count),
                                         device_data<float>(out), sqrt_result);
  check_launch("sum_of_squares");
}

}  // namespace loom::kernels::cuda
