// How a kernel treats its index tensor (tokens, targets) on a GPU.
#pragma once

namespace loom::kernels {

// checked: a kernel looks for the first index out of range and the call throws an invalid_argument
//   Error naming it. On a GPU that waits for the stream.
// trusted: the caller has checked the indices (GPT checks its host batches before copying them to
//   the GPU), so nothing waits. An index out of range is still never used to address memory: the
//   row it would have produced reads as NaN.
// On the CPU indices are always checked (it costs no synchronization there).
enum class IndexCheck { checked, trusted };

}  // namespace loom::kernels
