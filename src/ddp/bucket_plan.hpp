// Which gradients share a communication bucket, and where each one sits in the bucket's flat
// buffer: a pure function of the parameters' sizes and the order their gradients become ready, so
// every rank computes the same plan from the same inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace loom::ddp::detail {

struct PlannedBucket {
  std::vector<std::size_t> parameters;  // indices into the reducer's parameter list, in ready order
  std::vector<std::int64_t> offsets;    // element offset of each parameter's gradient in the buffer
  std::int64_t elements = 0;            // buffer length, alignment padding included
};

// Every offset is a multiple of this many elements (256 bytes of f32): GEMMs that accumulate into
// a gradient view and vectorized kernels need aligned rows.
inline constexpr std::int64_t bucket_alignment_elements = 64;

// order: a permutation of the parameter indices, in the order their gradients are expected to be
// ready. numels: elements per parameter (indexed by parameter). Buckets fill in that order; a
// bucket closes once it holds at least its cap in bytes (first_bucket_bytes for the first,
// bucket_bytes for the rest), so one large gradient can make a bucket larger than the cap. A cap
// <= 0 puts every gradient in a bucket of its own.
std::vector<PlannedBucket> plan_buckets(std::span<const std::size_t> order, std::span<const std::int64_t> numels,
                                        std::int64_t element_bytes, std::int64_t bucket_bytes,
                                        std::int64_t first_bucket_bytes);

}  // namespace loom::ddp::detail
