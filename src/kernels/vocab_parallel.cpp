#include "loom/kernels/vocab_parallel.hpp"

#include "kernels/cpu/vocab_parallel.hpp"
#include "kernels/cuda/indices.hpp"
#include "kernels/cuda/vocab_parallel.hpp"
#include "validate.hpp"

namespace loom::kernels {

namespace {

// The shard's real columns (or embedding rows) out of `width`, after checking the shard itself.
std::int64_t valid_width(const char* kernel, const VocabShard& shard, std::int64_t width) {
  const std::int64_t valid = shard.valid < 0 ? width : shard.valid;
  require(valid <= width, kernel, ": the shard's ", valid, " real columns exceed its width ", width);
  // A block of padding only (past the real ids) has no real columns wherever it starts.
  require(shard.vocab_size >= 1 && shard.first >= 0 && (valid == 0 || shard.first + valid <= shard.vocab_size), kernel,
          ": a shard of ids [", shard.first, ", ", shard.first + valid, ") does not fit a vocabulary of ",
          shard.vocab_size);
  return valid;
}

void check_rows(const char* kernel, const Tensor& logits, const Tensor& targets) {
  detail::require_floating(kernel, {"logits", logits});
  require(logits.rank() == 2, kernel, ": logits must be [rows, columns], got ", logits);
  require(targets.dtype() == DType::i32 || targets.dtype() == DType::i64, kernel, ": targets must be i32 or i64, got ",
          targets);
  detail::require_shape(kernel, {"targets", targets}, Shape{logits.size(0)});
}

void check_per_row(const char* kernel, const char* name, const Tensor& t, std::int64_t rows, std::int64_t width = 0) {
  detail::require_dtype(kernel, {name, t}, DType::f32);
  detail::require_shape(kernel, {name, t}, width == 0 ? Shape{rows} : Shape{rows, width});
}

// A position table [maxT, C] on the kernel's device, with a row for each of the tokens' steps.
void check_positions(const char* kernel, const char* name, const Tensor& table, const Tensor& tokens,
                     const Tensor& wte_shard, Device device) {
  require(table.device() == device, kernel, ": ", name, " is on ", table.device(), ", the other tensors on ", device);
  require(table.rank() == 2 && wte_shard.rank() == 2 && table.size(1) == wte_shard.size(1) && tokens.rank() == 2 &&
              tokens.size(1) <= table.size(0),
          kernel, ": ", name, " must be [maxT >= ", tokens.rank() == 2 ? tokens.size(1) : 0, ", C] like the table's ",
          wte_shard, ", got ", table);
}

}  // namespace

void vocab_parallel_max(const Tensor& logits, const Tensor& row_max, const VocabShard& shard, StreamRef stream) {
  const char* kernel = "vocab_parallel_max";
  const Device device = detail::common_device(kernel, {{"logits", logits}, {"row_max", row_max}});
  detail::require_floating(kernel, {"logits", logits});
  require(logits.rank() == 2, kernel, ": logits must be [rows, columns], got ", logits);
  check_per_row(kernel, "row_max", row_max, logits.size(0));
  const std::int64_t valid = valid_width(kernel, shard, logits.size(1));
  detail::dispatch(kernel, device, stream, [&] { cpu::vocab_parallel_max(logits, row_max, valid); },
                   [&](void* s) { cuda::vocab_parallel_max(logits, row_max, valid, s); });
}

void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                            const VocabShard& shard, StreamRef stream) {
  const char* kernel = "vocab_parallel_sum_exp";
  const Device device = detail::common_device(
      kernel, {{"logits", logits}, {"targets", targets}, {"row_max", row_max}, {"partial", partial}});
  check_rows(kernel, logits, targets);
  check_per_row(kernel, "row_max", row_max, logits.size(0));
  check_per_row(kernel, "partial", partial, logits.size(0), 2);
  const std::int64_t valid = valid_width(kernel, shard, logits.size(1));
  detail::dispatch(kernel, device, stream,
                   [&] { cpu::vocab_parallel_sum_exp(logits, targets, row_max, partial, shard, valid); },
                   [&](void* s) {
                     cuda::check_index_range(targets, shard.vocab_size, shard.ignore_index,
                                             "vocab_parallel_sum_exp: target", s);
                     cuda::vocab_parallel_sum_exp(logits, targets, row_max, partial, shard, valid, s);
                   });
}

void vocab_parallel_loss(const Tensor& targets, const Tensor& row_max, const Tensor& partial, const Tensor& losses,
                         const VocabShard& shard, StreamRef stream) {
  const char* kernel = "vocab_parallel_loss";
  const Device device = detail::common_device(
      kernel, {{"targets", targets}, {"row_max", row_max}, {"partial", partial}, {"losses", losses}});
  require(targets.rank() == 1 && (targets.dtype() == DType::i32 || targets.dtype() == DType::i64), kernel,
          ": targets must be [rows] i32 or i64, got ", targets);
  const std::int64_t rows = targets.size(0);
  check_per_row(kernel, "row_max", row_max, rows);
  check_per_row(kernel, "partial", partial, rows, 2);
  check_per_row(kernel, "losses", losses, rows);
  detail::dispatch(kernel, device, stream, [&] { cpu::vocab_parallel_loss(targets, row_max, partial, losses, shard); },
                   [&](void* s) { cuda::vocab_parallel_loss(targets, row_max, partial, losses, shard, s); });
}

void vocab_parallel_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                             const Tensor& dlosses, const Tensor& dlogits, const VocabShard& shard, StreamRef stream) {
  const char* kernel = "vocab_parallel_backward";
  const Device device = detail::common_device(kernel, {{"logits", logits},
                                                       {"targets", targets},
                                                       {"row_max", row_max},
                                                       {"partial", partial},
                                                       {"dlosses", dlosses},
                                                       {"dlogits", dlogits}});
  check_rows(kernel, logits, targets);
  check_per_row(kernel, "row_max", row_max, logits.size(0));
  check_per_row(kernel, "partial", partial, logits.size(0), 2);
  check_per_row(kernel, "dlosses", dlosses, logits.size(0));
  detail::require_same_dtype(kernel, {{"logits", logits}, {"dlogits", dlogits}});
  detail::require_shape(kernel, {"dlogits", dlogits}, logits.shape());
  const std::int64_t valid = valid_width(kernel, shard, logits.size(1));
  detail::dispatch(
      kernel, device, stream,
      [&] { cpu::vocab_parallel_backward(logits, targets, row_max, partial, dlosses, dlogits, shard, valid); },
      [&](void* s) { cuda::vocab_parallel_backward(logits, targets, row_max, partial, dlosses, dlogits, shard, valid, s); });
}

void vocab_parallel_embedding_forward(const Tensor& tokens, const Tensor& wte_shard, const Tensor& wpe,
                                      const Tensor& out, const VocabShard& shard, StreamRef stream, IndexCheck check) {
  const char* kernel = "vocab_parallel_embedding_forward";
  const Device device = detail::common_device(kernel, {{"tokens", tokens}, {"wte_shard", wte_shard}, {"out", out}});
  if (wpe.defined()) check_positions(kernel, "wpe", wpe, tokens, wte_shard, device);
  detail::require_dtype(kernel, {"tokens", tokens}, DType::i32);
  require(tokens.rank() == 2, kernel, ": tokens must be [B, T], got ", tokens);
  detail::require_floating(kernel, {"wte_shard", wte_shard});
  require(wte_shard.rank() == 2, kernel, ": wte_shard must be [rows, C], got ", wte_shard);
  detail::require_same_dtype(kernel, {{"wte_shard", wte_shard}, {"out", out}});
  if (wpe.defined()) detail::require_same_dtype(kernel, {{"wte_shard", wte_shard}, {"wpe", wpe}});
  detail::require_shape(kernel, {"out", out}, Shape{tokens.size(0), tokens.size(1), wte_shard.size(1)});
  const std::int64_t valid = valid_width(kernel, shard, wte_shard.size(0));
  detail::dispatch(kernel, device, stream, [&] { cpu::vocab_parallel_embedding_forward(tokens, wte_shard, wpe, out, shard, valid); },
                   [&](void* s) {
                     if (check == IndexCheck::checked) {
                       cuda::check_index_range(tokens, shard.vocab_size, std::nullopt, "vocab_parallel_embedding: token", s);
                     }
                     cuda::vocab_parallel_embedding_forward(tokens, wte_shard, wpe, out, shard, valid, s);
                   });
}

void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte_shard,
                                       const Tensor& dwpe, const VocabShard& shard, StreamRef stream) {
  const char* kernel = "vocab_parallel_embedding_backward";
  const Device device =
      detail::common_device(kernel, {{"tokens", tokens}, {"dout", dout}, {"dwte_shard", dwte_shard}});
  if (dwpe.defined()) {
    check_positions(kernel, "dwpe", dwpe, tokens, dwte_shard, device);
    detail::require_dtype(kernel, {"dwpe", dwpe}, DType::f32);
  }
  detail::require_dtype(kernel, {"tokens", tokens}, DType::i32);
  require(tokens.rank() == 2, kernel, ": tokens must be [B, T], got ", tokens);
  detail::require_floating(kernel, {"dout", dout});
  detail::require_dtype(kernel, {"dwte_shard", dwte_shard}, DType::f32);
  require(dwte_shard.rank() == 2, kernel, ": dwte_shard must be [rows, C], got ", dwte_shard);
  detail::require_shape(kernel, {"dout", dout}, Shape{tokens.size(0), tokens.size(1), dwte_shard.size(1)});
  const std::int64_t valid = valid_width(kernel, shard, dwte_shard.size(0));
  detail::dispatch(kernel, device, stream,
                   [&] { cpu::vocab_parallel_embedding_backward(tokens, dout, dwte_shard, dwpe, shard, valid); },
                   [&](void* s) { cuda::vocab_parallel_embedding_backward(tokens, dout, dwte_shard, dwpe, shard, valid, s); });
}

}  // namespace loom::kernels
