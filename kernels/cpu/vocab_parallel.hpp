// The CPU implementations of loom/kernels/vocab_parallel.hpp (arguments validated by the entry
// points in src/kernels/vocab_parallel.cpp).
#pragma once

#include "loom/kernels/vocab_parallel.hpp"

namespace loom::kernels::cpu {

void vocab_parallel_max(const Tensor& logits, const Tensor& row_max, std::int64_t valid);
void vocab_parallel_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                            const VocabShard& shard, std::int64_t valid);
void vocab_parallel_loss(const Tensor& targets, const Tensor& row_max, const Tensor& partial, const Tensor& losses,
                         const VocabShard& shard);
void vocab_parallel_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& partial,
                             const Tensor& dlosses, const Tensor& dlogits, const VocabShard& shard, std::int64_t valid);
void vocab_parallel_embedding_forward(const Tensor& tokens, const Tensor& wte_shard, const Tensor& wpe,
                                      const Tensor& out, const VocabShard& shard, std::int64_t valid);
void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte_shard,
                                       const Tensor& dwpe, const VocabShard& shard, std::int64_t valid);

}  // namespace loom::kernels::cpu
