#include "kernels/cpu/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/float_types.hpp"

namespace loom::kernels::cpu {

namespace {

// Writes the rounded copy of param[i] into model (if defined), in model's dtype.
void write_model_copy(const Tensor& model, std::int64_t n, const float* param) {
  if (!model.defined()) return;
  visit_float_dtype(model.dtype(), [&]<class M>() {
    M* out = model.data<M>();
    for (std::int64_t i = 0; i < n; ++i) out[i] = from_f32<M>(param[i]);
  });
}

}  // namespace

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWHyperparameters& hp) {
  const auto t = static_cast<double>(hp.step);
  AdamWConstants c{};
  c.beta1 = hp.beta1;
  c.beta2 = hp.beta2;
  c.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), t));
  c.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), t));
  c.lr = hp.lr;
  c.eps = hp.eps;
  c.grad_scale = hp.grad_scale;
  const CpuKernels& k = cpu_kernels();
  constexpr std::int64_t chunk = 4096;
  for (const AdamWTensor& tensor : tensors) {
    const std::int64_t n = tensor.param.numel(), chunks = (n + chunk - 1) / chunk;
    float* p = tensor.param.data<float>();
    float* m = tensor.m.data<float>();
    float* v = tensor.v.data<float>();
    AdamWConstants constants = c;
    constants.decay = tensor.decay ? hp.lr * hp.weight_decay : 0.0f;
    visit_float_dtype(tensor.grad.dtype(), [&]<class G>() {
      const G* g = tensor.grad.data<G>();
#pragma omp parallel for if (n > (1 << 15))
      for (std::int64_t ci = 0; ci < chunks; ++ci) {
        const std::int64_t begin = ci * chunk, count = std::min(chunk, n - begin);
        if constexpr (std::is_same_v<G, float>) {
          k.adamw(p + begin, m + begin, v + begin, g + begin, count, constants);
        } else {
          float grad[chunk];
          to_f32(g + begin, grad, count);
          k.adamw(p + begin, m + begin, v + begin, grad, count, constants);
        }
      }
    });
    write_model_copy(tensor.model, n, p);
  }
}

void sgd_step(std::span<const SgdTensor> tensors, const SgdHyperparameters& hp) {
  for (const SgdTensor& tensor : tensors) {
    const std::int64_t n = tensor.param.numel();
    float* p = tensor.param.data<float>();
    float* buf = hp.momentum != 0.0f ? tensor.momentum_buffer.data<float>() : nullptr;
    const float decay = tensor.decay ? hp.weight_decay : 0.0f;
    visit_float_dtype(tensor.grad.dtype(), [&]<class G>() {
      const G* g = tensor.grad.data<G>();
#pragma omp parallel for if (n > (1 << 15))
      for (std::int64_t i = 0; i < n; ++i) {
        float grad = to_f32(g[i]) * hp.grad_scale + decay * p[i];
        if (buf != nullptr) {
          buf[i] = hp.step == 1 ? grad : hp.momentum * buf[i] + (1.0f - hp.dampening) * grad;
          grad = hp.nesterov ? grad + hp.momentum * buf[i] : buf[i];
        }
        p[i] -= hp.lr * grad;
      }
    });
    write_model_copy(tensor.model, n, p);
  }
}

void unscale_and_check_finite(std::span<const Tensor> grads, float scale, const Tensor& found_nonfinite) {
  bool nonfinite = false;
  for (const Tensor& grad : grads) {
    visit_float_dtype(grad.dtype(), [&]<class G>() {
      G* g = grad.data<G>();
      const std::int64_t n = grad.numel();
      bool local = false;
#pragma omp parallel for reduction(|| : local) if (n > (1 << 15))
      for (std::int64_t i = 0; i < n; ++i) {
        g[i] = from_f32<G>(to_f32(g[i]) * scale);
        local = local || !std::isfinite(to_f32(g[i]));  // the stored value: scaling may overflow f16
      }
      nonfinite = nonfinite || local;
    });
  }
  if (nonfinite) found_nonfinite.data<float>()[0] = 1.0f;
}

double sum_of_squares(std::span<const Tensor> tensors) {
  // Fixed chunks, each summed by the variant's 16-lane loop, then the chunk sums in order: the same
  // result whatever the thread count.
  constexpr std::int64_t chunk = 1 << 14;
  const CpuKernels& k = cpu_kernels();
  double total = 0.0;
  for (const Tensor& tensor : tensors) {
    visit_float_dtype(tensor.dtype(), [&]<class T>() {
      const T* x = tensor.data<T>();
      const std::int64_t n = tensor.numel(), chunks = (n + chunk - 1) / chunk;
      std::vector<double> sums(static_cast<std::size_t>(chunks), 0.0);
#pragma omp parallel for if (chunks > 1)
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::int64_t begin = c * chunk, count = std::min(chunk, n - begin);
        if constexpr (std::is_same_v<T, float>) {
          sums[static_cast<std::size_t>(c)] = k.sum_of_squares(x + begin, count);
        } else {
          std::vector<float> values(static_cast<std::size_t>(count));
          to_f32(x + begin, values.data(), count);
          sums[static_cast<std::size_t>(c)] = k.sum_of_squares(values.data(), count);
        }
      }
      for (double s : sums) total += s;
    });
  }
  return total;
}

}  // namespace loom::kernels::cpu
