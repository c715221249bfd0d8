#include "loom/kernels/softmax.hpp"

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/indices.hpp"
#include "kernels/cuda/training.hpp"
#include "loom/kernels/cross_entropy.hpp"
#include "validate.hpp"

namespace loom::kernels {

void softmax_forward(const Tensor& x, const Tensor& out, StreamRef stream, bool causal) {
  const char* kernel = "softmax_forward";
  const Device device = detail::common_device(kernel, {{"x", x}, {"out", out}});
  detail::require_floating(kernel, {"x", x});
  detail::require_same_dtype(kernel, {{"x", x}, {"out", out}});
  const std::int64_t n = detail::last_dim(kernel, {"x", x});
  detail::require_shape(kernel, {"out", out}, x.shape());
  require(!causal || (x.rank() >= 2 && x.size(-2) == n), kernel, ": a causal softmax needs [..., T, T], got ",
          x);
  detail::dispatch(kernel, device, stream, [&] { cpu::softmax_forward(x, out, causal); },
                   [&](void* s) { cuda::softmax_forward(x, out, causal, s); });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, StreamRef stream) {
  const char* kernel = "softmax_backward";
  const Device device = detail::common_device(kernel, {{"y", y}, {"dy", dy}, {"dx", dx}});
  detail::require_floating(kernel, {"y", y});
  detail::require_same_dtype(kernel, {{"y", y}, {"dy", dy}, {"dx", dx}});
  detail::last_dim(kernel, {"y", y});
  detail::require_shape(kernel, {"dy", dy}, y.shape());
  detail::require_shape(kernel, {"dx", dx}, y.shape());
  detail::dispatch(kernel, device, stream, [&] { cpu::softmax_backward(y, dy, dx); },
                   [&](void* s) { cuda::softmax_backward(y, dy, dx, s); });
}

namespace {
// Checks the arguments both cross-entropy passes share; returns the vocabulary size used.
std::int64_t check_cross_entropy(const char* kernel, const Tensor& logits, const Tensor& targets, const Tensor& per_row,
                                 const char* per_row_name, const CrossEntropyOptions& options) {
  detail::common_device(kernel, {{"logits", logits}, {"targets", targets}, {per_row_name, per_row}});
  detail::require_floating(kernel, {"logits", logits});
  require(logits.rank() == 2, kernel, ": logits must be [rows, vocab], got ", logits);
  require(targets.dtype() == DType::i32 || targets.dtype() == DType::i64, kernel, ": targets must be i32 or i64, got ",
          targets);
  detail::require_shape(kernel, {"targets", targets}, Shape{logits.size(0)});
  detail::require_dtype(kernel, {per_row_name, per_row}, DType::f32);
  detail::require_shape(kernel, {per_row_name, per_row}, Shape{logits.size(0)});
  const std::int64_t vocab = options.vocab_size < 0 ? logits.size(1) : options.vocab_size;
  require(vocab >= 1 && vocab <= logits.size(1), kernel, ": vocab_size ", options.vocab_size,
          " must be in [1, ", logits.size(1), "] (the logits' width)");
  return vocab;
}
}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                           const CrossEntropyOptions& options, StreamRef stream) {
  const char* kernel = "cross_entropy_forward";
  const std::int64_t vocab = check_cross_entropy(kernel, logits, targets, losses, "losses", options);
  detail::dispatch(
      kernel, logits.device(), stream,
      [&] { cpu::cross_entropy_forward(logits, targets, losses, vocab, options.ignore_index); },
      [&](void* s) {
        if (options.targets == IndexCheck::checked) {
          cuda::check_index_range(targets, vocab, options.ignore_index, "cross_entropy_forward: target", s);
        }
        cuda::cross_entropy_forward(logits, targets, losses, vocab, options.ignore_index, s);
      });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                            const Tensor& dlogits, const CrossEntropyOptions& options, StreamRef stream) {
  const char* kernel = "cross_entropy_backward";
  const std::int64_t vocab = check_cross_entropy(kernel, logits, targets, dlosses, "dlosses", options);
  detail::common_device(kernel, {{"logits", logits}, {"dlogits", dlogits}});
  detail::require_same_dtype(kernel, {{"logits", logits}, {"dlogits", dlogits}});
  detail::require_shape(kernel, {"dlogits", dlogits}, logits.shape());
  detail::dispatch(
      kernel, logits.device(), stream,
      [&] { cpu::cross_entropy_backward(logits, targets, dlosses, dlogits, vocab, options.ignore_index); },
      [&](void* s) { cuda::cross_entropy_backward(logits, targets, dlosses, dlogits, vocab, options.ignore_index, s); });
}

void accumulate_mean(const Tensor& values, double divisor, const Tensor& out, StreamRef stream) {
  const char* kernel = "accumulate_mean";
  const Device device = detail::common_device(kernel, {{"values", values}, {"out", out}});
  detail::require_dtype(kernel, {"values", values}, DType::f32);
  detail::require_dtype(kernel, {"out", out}, DType::f32);
  require(values.rank() == 1, kernel, ": values must be [n], got ", values);
  detail::require_shape(kernel, {"out", out}, Shape{1});
  require(divisor > 0, kernel, ": the divisor must be positive, got ", divisor);
  detail::dispatch(kernel, device, stream, [&] { cpu::accumulate_mean(values, divisor, out); },
                   [&](void* s) { cuda::accumulate_mean(values, divisor, out, s); });
}

}  // namespace loom::kernels
