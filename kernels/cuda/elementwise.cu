// GELU, residual add and casts: grid-stride loops in fp32 math; GELU and the residual add move
// 16-byte packs when their tensors are 16-byte aligned (the usual case: buffers start aligned).
#include "common.cuh"
#include "training.hpp"

namespace loom::kernels::cuda {

namespace {

constexpr int threads = 256;

// The sigmoid form of tanh-GELU, as on the CPU: x * sigmoid(2z).
__device__ __forceinline__ float gelu(float x) {
  const float z = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + __expf(-2.0f * z));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float k = 0.7978845608028654f;
  const float z = k * (x + 0.044715f * x * x * x);
  const float s = 1.0f / (1.0f + __expf(-2.0f * z));
  const float dz = k * (1.0f + 3.0f * 0.044715f * x * x);
  return s + 2.0f * x * s * (1.0f - s) * dz;
}

// 16 bytes of T: one vector load or store (8 f16/bf16 or 4 f32 elements).
template <class T>
struct alignas(16) Pack {
  static constexpr int size = 16 / sizeof(T);
  T v[size];
};

struct GeluForward {
  __device__ float operator()(float x) const { return gelu(x); }
};
struct GeluBackward {  // (x, dout)
  __device__ float operator()(float x, float dout) const { return dout * gelu_grad(x); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// out[i] = op(in[i]...) in fp32, grid-stride. With `packed` (every pointer 16-byte aligned) each
// step moves 16-byte packs and the last n % Pack::size elements go one by one; the arithmetic per
// element is the same either way, so are the bits.
template <class T, class Op>
__global__ void unary_kernel(const T* x, T* out, std::int64_t n, bool packed, Op op) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (packed) {
    constexpr int width = Pack<T>::size;
    const std::int64_t packs = n / width;
    for (std::int64_t p = first; p < packs; p += stride) {
      const Pack<T> in = reinterpret_cast<const Pack<T>*>(x)[p];
      Pack<T> result;
#pragma unroll
      for (int l = 0; l < width; ++l) result.v[l] = from_f32<T>(op(to_f32(in.v[l])));
      reinterpret_cast<Pack<T>*>(out)[p] = result;
    }
    done = packs * width;
  }
  for (std::int64_t i = done + first; i < n; i += stride) out[i] = from_f32<T>(op(to_f32(x[i])));
}

template <class T, class Op>
__global__ void binary_kernel(const T* a, const T* b, T* out, std::int64_t n, bool packed, Op op) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (packed) {
    constexpr int width = Pack<T>::size;
    const std::int64_t packs = n / width;
    for (std::int64_t p = first; p < packs; p += stride) {
      const Pack<T> in_a = reinterpret_cast<const Pack<T>*>(a)[p], in_b = reinterpret_cast<const Pack<T>*>(b)[p];
      Pack<T> result;
#pragma unroll
      for (int l = 0; l < width; ++l) result.v[l] = from_f32<T>(op(to_f32(in_a.v[l]), to_f32(in_b.v[l])));
      reinterpret_cast<Pack<T>*>(out)[p] = result;
    }
    done = packs * width;
  }
  for (std::int64_t i = done + first; i < n; i += stride) out[i] = from_f32<T>(op(to_f32(a[i]), to_f32(b[i])));
}

bool aligned16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (reinterpret_cast<std::uintptr_t>(t->raw_data()) % 16 != 0) return false;
  }
  return true;
}

// Blocks for n elements moved in 16-byte packs when `packed`.
template <class T>
unsigned grid_for_packs(std::int64_t n, bool packed) {
  return grid_for(packed ? (n + Pack<T>::size - 1) / Pack<T>::size : n, threads);
}

template <class In, class Out>
__global__ void cast_kernel(const In* src, Out* dst, std::int64_t n, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_f32<Out>(to_f32(src[i]) * scale);
  }
}

// The same counter-based bits as loom::kernels::stochastic_rounding_bits (splitmix64).
__device__ __forceinline__ std::uint32_t rounding_bits(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z >> 48);
}

__global__ void stochastic_bf16_kernel(const float* src, std::uint16_t* dst, std::int64_t n, std::uint64_t seed,
                                       std::uint64_t offset, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float value = src[i] * scale;
    const std::uint32_t bits = __float_as_uint(value);
    if ((bits & 0x7f800000u) == 0x7f800000u) {
      dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(value));
    } else {
      dst[i] = static_cast<std::uint16_t>((bits + rounding_bits(seed, offset + static_cast<std::uint64_t>(i))) >> 16);
    }
  }
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out, void* stream) {
  const DeviceGuard guard(x.device());
  const bool packed = aligned16({&x, &out});
  visit_float_dtype(x.dtype(), [&]<class T>() {
    unary_kernel<T><<<grid_for_packs<T>(x.numel(), packed), threads, 0, as_stream(stream)>>>(
        device_data<T>(x), device_data<T>(out), x.numel(), packed, GeluForward{});
  });
  check_launch("gelu_forward");
}

void gelu_backward(const Tensor& x, const Tensor& dout, const Tensor& dx, void* stream) {
  const DeviceGuard guard(x.device());
  const bool packed = aligned16({&x, &dout, &dx});
  visit_float_dtype(x.dtype(), [&]<class T>() {
    binary_kernel<T><<<grid_for_packs<T>(x.numel(), packed), threads, 0, as_stream(stream)>>>(
        device_data<T>(x), device_data<T>(dout), device_data<T>(dx), x.numel(), packed, GeluBackward{});
  });
  check_launch("gelu_backward");
}

void residual_add(const Tensor& a, const Tensor& b, const Tensor& out, void* stream) {
  const DeviceGuard guard(a.device());
  const bool packed = aligned16({&a, &b, &out});
  visit_float_dtype(a.dtype(), [&]<class T>() {
    binary_kernel<T><<<grid_for_packs<T>(a.numel(), packed), threads, 0, as_stream(stream)>>>(
        device_data<T>(a), device_data<T>(b), device_data<T>(out), a.numel(), packed, Add{});
  });
  check_launch("residual_add");
}

void cast(const Tensor& src, const Tensor& dst, const CastOptions& options, void* stream) {
  const DeviceGuard guard(src.device());
  const std::int64_t n = src.numel();
  if (n == 0) return;
  if (options.rounding == Rounding::stochastic) {
    stochastic_bf16_kernel<<<grid_for(n, threads), threads, 0, as_stream(stream)>>>(
        device_data<float>(src), device_data<std::uint16_t>(dst), n, options.seed, options.offset, options.scale);
  } else {
    visit_float_dtype(src.dtype(), [&]<class In>() {
      visit_float_dtype(dst.dtype(), [&]<class Out>() {
        cast_kernel<In, Out><<<grid_for(n, threads), threads, 0, as_stream(stream)>>>(device_data<In>(src),
                                                                                     device_data<Out>(dst), n,
                                                                                     options.scale);
      });
    });
  }
  check_launch("cast");
}

}  // namespace loom::kernels::cuda
