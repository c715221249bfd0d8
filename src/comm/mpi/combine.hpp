// The element-wise reductions of loom's MPI collective algorithms (f32, i32, i64; sum, max, min),
// in loops the compiler vectorizes. The order of the operands is the caller's, so that every rank
// computes the same bits.
#pragma once

#include <cstdint>
#include <span>

#include "loom/comm/communicator.hpp"

namespace loom::comm::detail {

// out[i] = op(first[i], second[i]); out may be first or second.
void combine(void* out, const void* first, const void* second, std::int64_t count, DType dtype, ReduceOp op);

// out[i] = op(...op(op(inputs[0][i], inputs[1][i]), inputs[2][i])...); out may be one of the inputs.
void combine_in_order(void* out, std::span<const void* const> inputs, std::int64_t count, DType dtype, ReduceOp op);

}  // namespace loom::comm::detail
