#include "loom/kernels/embedding.hpp"

#include "kernels/cpu/training.hpp"
#include "kernels/cuda/indices.hpp"
#include "kernels/cuda/training.hpp"
#include "validate.hpp"

namespace loom::kernels {

namespace {
void check_tokens(const char* kernel, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  detail::require_dtype(kernel, {"tokens", tokens}, DType::i32);
  require(tokens.rank() == 2, kernel, ": tokens must be [B, T], got ", tokens);
  require(wte.rank() == 2 && wpe.rank() == 2 && wte.size(1) == wpe.size(1), kernel,
          ": wte [V, C] and wpe [maxT, C] must share C, got ", wte, " and ", wpe);
  require(tokens.size(1) <= wpe.size(0), kernel, ": ", tokens.size(1), " positions but wpe has only ", wpe.size(0));
}
}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, const Tensor& out,
                       StreamRef stream, IndexCheck check) {
  const char* kernel = "embedding_forward";
  const Device device = detail::common_device(kernel, {{"tokens", tokens}, {"wte", wte}, {"wpe", wpe}, {"out", out}});
  detail::require_floating(kernel, {"wte", wte});
  detail::require_same_dtype(kernel, {{"wte", wte}, {"wpe", wpe}, {"out", out}});
  check_tokens(kernel, tokens, wte, wpe);
  detail::require_shape(kernel, {"out", out}, Shape{tokens.size(0), tokens.size(1), wte.size(1)});
  detail::dispatch(kernel, device, stream, [&] { cpu::embedding_forward(tokens, wte, wpe, out); },
                   [&](void* s) {
                     if (check == IndexCheck::checked) {
                       cuda::check_index_range(tokens, wte.size(0), std::nullopt, "embedding_forward: token", s);
                     }
                     cuda::embedding_forward(tokens, wte, wpe, out, s);
                   });
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte, const Tensor& dwpe,
                        StreamRef stream) {
  const char* kernel = "embedding_backward";
  const Device device =
      detail::common_device(kernel, {{"tokens", tokens}, {"dout", dout}, {"dwte", dwte}, {"dwpe", dwpe}});
  detail::require_floating(kernel, {"dout", dout});
  detail::require_dtype(kernel, {"dwte", dwte}, DType::f32);
  detail::require_dtype(kernel, {"dwpe", dwpe}, DType::f32);
  check_tokens(kernel, tokens, dwte, dwpe);
  detail::require_shape(kernel, {"dout", dout}, Shape{tokens.size(0), tokens.size(1), dwte.size(1)});
  detail::dispatch(kernel, device, stream, [&] { cpu::embedding_backward(tokens, dout, dwte, dwpe); },
                   [&](void* s) { cuda::embedding_backward(tokens, dout, dwte, dwpe, s); });
}

}  // namespace loom::kernels
