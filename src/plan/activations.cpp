#include "loom/plan/activations.hpp"

#include "loom/core/error.hpp"

namespace loom::plan {

ActivationBytes predict_activations(const ActivationShape& shape) {
  const nn::GPTConfig& m = shape.model;
  m.validate();
  const std::int64_t t = shape.tensor, steps = shape.steps > 0 ? shape.steps : m.context;
  require(shape.batch >= 1, "activation model: the micro-batch must be positive, got ", shape.batch);
  require(t >= 1 && m.heads % t == 0, "activation model: ", t, " tensor-parallel ranks do not divide ", m.heads,
          " heads");
  require(steps <= m.context, "activation model: sequence length ", steps, " exceeds the context ", m.context);
  require(shape.storage_bytes == 2 || shape.storage_bytes == 4, "activation model: storage bytes must be 2 or 4, got ",
          shape.storage_bytes);
  const std::int64_t s = shape.storage_bytes, n = shape.batch * steps, nc = n * m.channels;
  std::int64_t kept_none = 0, kept_checkpointed = 0;
  for (std::int64_t l = 0; l < m.layers; ++l) (m.checkpointed(l) ? kept_checkpointed : kept_none) += 1;
  const bool selective = m.checkpointing == nn::ActivationCheckpointing::selective;
  // Units of s N C, with the tensor-split buffers counted in 1/t (24 / t = 24 units split t ways).
  const double per_none = 10.0 + 24.0 / static_cast<double>(t);
  double per_checkpointed = 1, once = 4;
  if (selective) per_checkpointed = 2.0 + (shape.cpu ? 8.0 : 12.0) / static_cast<double>(t);
  if (kept_checkpointed > 0) once += selective ? 7.0 + 16.0 / static_cast<double>(t) : per_none;
  ActivationBytes out;
  const double units = per_none * static_cast<double>(kept_none) +
                       per_checkpointed * static_cast<double>(kept_checkpointed) + once;
  const std::int64_t stats_per_block = 32 * n;  // two LayerNorms' mean and rstd (fp32), and their like
  out.blocks = static_cast<std::int64_t>(units * static_cast<double>(s * nc)) + stats_per_block * kept_none +
               (selective ? stats_per_block / 2 * kept_checkpointed : 0);
  const std::int64_t heads = m.heads / t;
  const nn::AttentionKernel kernel =
      nn::resolve(m.attention, shape.batch, heads, steps, s == 2 ? DType::bf16 : DType::f32);
  const std::int64_t per_attention =
      kernel == nn::AttentionKernel::fused ? 4 * shape.batch * heads * steps : s * shape.batch * heads * steps * steps;
  out.attention = per_attention * (kept_none + (kept_checkpointed > 0 ? 1 : 0));
  out.logits = s * n * m.padded_vocab() / t * (t > 1 ? 2 : 1);
  return out;
}

}  // namespace loom::plan
