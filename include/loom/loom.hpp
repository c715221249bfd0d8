// Everything in loom's public API that needs no vendor headers.
#pragma once

#include "loom/config.hpp"
#include "loom/core/allocator.hpp"
#include "loom/core/build_info.hpp"
#include "loom/core/caching_allocator.hpp"
#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/gpu_info.hpp"
#include "loom/core/numeric.hpp"
#include "loom/core/process.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"
#include "loom/core/tensor.hpp"
#include "loom/core/tensor_ops.hpp"
