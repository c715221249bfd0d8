// The bodies of the CPU kernel table (dispatch.hpp), written once over a 16-lane float vector V
// and compiled once per instruction set: isa_<variant>.cpp includes this header inside its
// `#pragma GCC target` region, after every standard header, so each variant's copy is compiled for
// its own instructions while the standard library stays baseline code.
//
// Rules that keep the variants apart and equal:
// - Every template here takes V as its first parameter, so each variant's instantiations have names
//   of their own; a non-template inline function here would be one symbol compiled for several
//   instruction sets, and the linker could hand a baseline caller the AVX-512 copy.
// - Every variant performs the same operations in the same order on the same 16 lanes, reduces
//   lanes in the same tree (V::sum, V::max_lane) and fuses the same multiply-adds, so all of them
//   produce the same bits.
#pragma once

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/isa_sgemm_kernels.hpp"

namespace loom::kernels::cpu::isa {

// Calls body(offset, count) for consecutive blocks of up to 16 elements covering [0, n).
template <class V, class Body>
inline void for_blocks(std::int64_t n, Body&& body) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) body(i, 16);
  if (i < n) body(i, static_cast<int>(n - i));
}

template <class V>
inline V load(const float* p, int count) {
  return count == 16 ? V::load(p) : V::load_partial(p, count);
}
// As load, with lanes past the end taken from fill.
template <class V>
inline V load_or(const float* p, int count, const V& fill) {
  return count == 16 ? V::load(p) : V::load_partial_or(p, count, fill);
}
template <class V>
inline void store(const V& v, float* p, int count) {
  if (count == 16) v.store(p);
  else v.store_partial(p, count);
}

// e^x = y 2^n for x within exp's range, n = exp_power(x): Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2 / 2, and Cephes' degree-7 polynomial for y = e^r (about 1 ulp). (Two functions rather
// than one returning both: a struct of two Vec16 measured GELU 30-70% slower with AVX2.)
template <class V>
inline V exp_power(V x) {
  return V::round_even(x * V::broadcast(1.44269504088896341f));
}

template <class V>
inline V exp_mantissa(V x, V n) {
  V r = V::fnma(n, V::broadcast(0.693359375f), x);
  r = V::fnma(n, V::broadcast(-2.12194440e-4f), r);
  V p = V::broadcast(1.9875691500e-4f);
  p = V::fma(p, r, V::broadcast(1.3981999507e-3f));
  p = V::fma(p, r, V::broadcast(8.3334519073e-3f));
  p = V::fma(p, r, V::broadcast(4.1665795894e-2f));
  p = V::fma(p, r, V::broadcast(1.6666665459e-1f));
  p = V::fma(p, r, V::broadcast(5.0000001201e-1f));
  return V::fma(p, r * r, r) + V::broadcast(1.0f);
}

// About log(FLT_MIN): exp's results below it would be subnormal and are flushed to 0.
inline constexpr float exp_lower_limit = -87.33654022216797f;

// exp(x) (exp_power, exp_mantissa): +inf above the largest finite result, 0 below FLT_MIN's
// logarithm (results that would be subnormal are flushed), NaN kept.
template <class V>
inline V exp(V x) {
  const V hi = V::broadcast(88.72283172607422f);  // the largest float whose exp is finite
  const V lo = V::broadcast(exp_lower_limit);
  const V xc = V::min(V::max(x, lo), hi);
  V n = exp_power<V>(xc);
  const V y = exp_mantissa<V>(xc, n);
  // n reaches 128 only near the top of the range: scale by 2 first so 2^n stays representable.
  const V one = V::broadcast(1.0f), n_max = V::broadcast(127.0f);
  const V twice = V::select_gt(n, n_max, V::broadcast(2.0f), one);
  n = V::min(n, n_max);
  V result = (y * twice) * V::pow2(n);
  result = V::select_gt(x, hi, V::broadcast(__builtin_inff()), result);
  result = V::select_lt(x, lo, V::zero(), result);
  return V::select_nan(x, x, result);
}

template <class V>
void exp_array(const float* x, float* out, std::int64_t n) {
  for_blocks<V>(n, [&](std::int64_t i, int count) { store(exp<V>(load<V>(x + i, count)), out + i, count); });
}

// GELU (tanh approximation) as x sigmoid(2z) = x / (1 + e^t) with t = -2z, z = sqrt(2/pi) (x +
// 0.044715 x^3), and its derivative s + 2 x s (1 - s) dz/dx with s = sigmoid(2z): the operations of
// loom::kernels::gelu_tanh. -2 sqrt(2/pi) is one constant (doubling is exact, so t is the same).
//
// e^t is exp's with t clamped to +-80 and without exp's special cases, a third of its operations
// (GELU forward took 17-31% and backward 12-24% less time on the Xeon): 2^n then needs no scaling,
// and e^t is never infinite or subnormal. Below t = -80, 1 + e^t rounds to 1 as it did with exp.
// Above 80 (x below about -9.67, fp64's GELU under 1e-33) the sigmoid is taken as 0, where exp gave
// GELU values down to -3e-38, -0 past t = 88.7 (x = -10.06), and a derivative whose s went
// subnormal. Only there, at +-inf, and where x^2 overflows dz/dx (the derivative then its limit, 0
// or 1, not NaN) do the bits differ from exp's.
inline constexpr float gelu_t_limit = 80.0f;

template <class V>
inline V exp_clamped(V t) {
  const V tc = V::min(V::max(t, V::broadcast(-gelu_t_limit)), V::broadcast(gelu_t_limit));
  const V n = exp_power<V>(tc);
  return exp_mantissa<V>(tc, n) * V::pow2(n);
}

template <class V>
inline V gelu_exponent(V x) {
  return V::broadcast(-1.5957691216057308f) * (x + V::broadcast(0.044715f) * x * x * x);
}

template <class V>
inline V gelu(V x) {
  const V t = gelu_exponent<V>(x);
  return V::select_gt(t, V::broadcast(gelu_t_limit), V::zero(), x / (V::broadcast(1.0f) + exp_clamped<V>(t)));
}

// Past the limits the derivative is its limit, exactly 0 or 1, also where x^2 would overflow dz/dx.
template <class V>
inline V gelu_grad(V x) {
  const V k = V::broadcast(0.7978845608028654f), one = V::broadcast(1.0f), limit = V::broadcast(gelu_t_limit);
  const V t = gelu_exponent<V>(x);
  const V s = one / (one + exp_clamped<V>(t));
  const V dz = k * (one + V::broadcast(3.0f * 0.044715f) * x * x);
  const V grad = s + V::broadcast(2.0f) * x * s * (one - s) * dz;
  return V::select_lt(t, V::broadcast(-gelu_t_limit), one, V::select_gt(t, limit, V::zero(), grad));
}

template <class V>
void gelu_forward(const float* x, float* out, std::int64_t n) {
  for_blocks<V>(n, [&](std::int64_t i, int count) { store(gelu<V>(load<V>(x + i, count)), out + i, count); });
}

template <class V>
void gelu_backward(const float* x, const float* dout, float* dx, std::int64_t n) {
  for_blocks<V>(n, [&](std::int64_t i, int count) {
    store(load<V>(dout + i, count) * gelu_grad<V>(load<V>(x + i, count)), dx + i, count);
  });
}

template <class V>
void add(const float* a, const float* b, float* out, std::int64_t n) {
  for_blocks<V>(n, [&](std::int64_t i, int count) {
    store(load<V>(a + i, count) + load<V>(b + i, count), out + i, count);
  });
}

template <class V>
void epilogue_row(const EpilogueRow& row) {
  const V alpha = V::broadcast(row.alpha), beta = V::broadcast(row.beta);
  for_blocks<V>(row.n, [&](std::int64_t i, int count) {
    V v = alpha * load<V>(row.product + i, count);
    if (row.c) v = v + beta * load<V>(row.c + i, count);
    if (row.bias) v = v + load<V>(row.bias + i, count);
    if (row.gelu) {
      if (row.pre) store(v, row.pre + i, count);
      v = gelu<V>(v);
    }
    store(v, row.out + i, count);
  });
}

// sum(x), 16 lane sums reduced in the fixed tree.
template <class V>
inline float sum(const float* x, std::int64_t n) {
  V acc = V::zero();
  for_blocks<V>(n, [&](std::int64_t i, int count) { acc = acc + load<V>(x + i, count); });
  return acc.sum();
}

template <class V>
void layernorm_forward(const float* x, const float* weight, const float* bias, float* out, float* mean, float* rstd,
                       std::int64_t rows, std::int64_t channels, float eps) {
  const auto c = static_cast<float>(channels);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * channels;
    float* o = out + r * channels;
    const float m = sum<V>(row, channels) / c;
    const V mv = V::broadcast(m);
    V squares = V::zero();
    for_blocks<V>(channels, [&](std::int64_t i, int count) {
      const V d = load_or<V>(row + i, count, mv) - mv;  // 0 past the row's end
      squares = V::fma(d, d, squares);
    });
    const float s = 1.0f / __builtin_sqrtf(squares.sum() / c + eps);
    const V sv = V::broadcast(s);
    for_blocks<V>(channels, [&](std::int64_t i, int count) {
      const V norm = (load<V>(row + i, count) - mv) * sv;
      store(norm * load<V>(weight + i, count) + load<V>(bias + i, count), o + i, count);
    });
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class V>
void layernorm_backward(const float* dout, const float* x, const float* weight, const float* mean, const float* rstd,
                        const float* residual, float* dx, std::int64_t rows, std::int64_t channels) {
  const auto c = static_cast<float>(channels);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * channels;
    const float* gr = dout + r * channels;
    const V mv = V::broadcast(mean[r]), sv = V::broadcast(rstd[r]);
    V dnorm_sum = V::zero(), dnorm_norm_sum = V::zero();
    for_blocks<V>(channels, [&](std::int64_t i, int count) {
      // Past the row's end the loads are 0, so dnorm is 0 and both sums gain +-0.
      const V norm = (load<V>(xr + i, count) - mv) * sv;
      const V dnorm = load<V>(gr + i, count) * load<V>(weight + i, count);
      dnorm_sum = dnorm_sum + dnorm;
      dnorm_norm_sum = V::fma(dnorm, norm, dnorm_norm_sum);
    });
    const V dnorm_mean = V::broadcast(dnorm_sum.sum() / c), dnorm_norm_mean = V::broadcast(dnorm_norm_sum.sum() / c);
    float* o = dx + r * channels;
    const float* res = residual != nullptr ? residual + r * channels : nullptr;
    for_blocks<V>(channels, [&](std::int64_t i, int count) {
      const V norm = (load<V>(xr + i, count) - mv) * sv;
      const V dnorm = load<V>(gr + i, count) * load<V>(weight + i, count);
      const V grad = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * sv;
      store(res != nullptr ? load<V>(res + i, count) + grad : grad, o + i, count);
    });
  }
}

// The parameter gradients' sums over rows, for channels [i, i + 16 B) (B blocks of 16, the last
// `lanes` wide): each block sums over the rows in order, as it does alone. One block's two chains of
// adds wait on each other's latency from row to row; several blocks interleave theirs (0.7-0.8x the
// time at B = 4 on 1024 x 128, AVX2 and AVX-512 on the Xeon).
template <class V, int B>
inline void layernorm_param_grads_blocks(const float* dout, const float* x, const float* mean, const float* rstd,
                                         std::int64_t rows, std::int64_t stride, std::int64_t i, int lanes,
                                         float* dweight, float* dbias) {
  V dw[B], db[B];
  for (int b = 0; b < B; ++b) dw[b] = db[b] = V::zero();
  for (std::int64_t r = 0; r < rows; ++r) {
    const V mv = V::broadcast(mean[r]), sv = V::broadcast(rstd[r]);
    for (int b = 0; b < B; ++b) {
      const int count = b == B - 1 ? lanes : 16;
      const V g = load<V>(dout + r * stride + i + 16 * b, count);
      const V norm = (load<V>(x + r * stride + i + 16 * b, count) - mv) * sv;
      dw[b] = V::fma(norm, g, dw[b]);
      db[b] = db[b] + g;
    }
  }
  for (int b = 0; b < B; ++b) {
    const int count = b == B - 1 ? lanes : 16;
    store(dw[b], dweight + i + 16 * b, count);
    store(db[b], dbias + i + 16 * b, count);
  }
}

template <class V>
void layernorm_param_grads(const float* dout, const float* x, const float* mean, const float* rstd, std::int64_t rows,
                           std::int64_t stride, std::int64_t count, float* dweight, float* dbias) {
  constexpr int group = 4;
  std::int64_t i = 0;
  for (; i + 16 * group <= count; i += 16 * group) {
    layernorm_param_grads_blocks<V, group>(dout, x, mean, rstd, rows, stride, i, 16, dweight, dbias);
  }
  for (; i < count; i += 16) {
    const int lanes = count - i < 16 ? static_cast<int>(count - i) : 16;
    layernorm_param_grads_blocks<V, 1>(dout, x, mean, rstd, rows, stride, i, lanes, dweight, dbias);
  }
}

// max(scale x[0, n)), n >= 1, scale > 0, lanes past the end filled with -inf.
template <class V>
inline float max_of(const float* x, std::int64_t n, float scale = 1.0f) {
  const V minus_inf = V::broadcast(-__builtin_inff()), sv = V::broadcast(scale);
  V acc = minus_inf;
  for_blocks<V>(n, [&](std::int64_t i, int count) { acc = V::max(acc, load_or<V>(x + i, count, minus_inf) * sv); });
  return acc.max_lane();
}

// exp(x) for x <= 0 or NaN: exp's bits (for such x its top-of-range scaling multiplies by 1 and
// its +inf select never fires), without those operations. A positive x is taken as 0 (so 2^n stays
// in range in every variant; exp_shifted's callers never pass one but in a row holding a NaN).
template <class V>
inline V exp_nonpositive(V x) {
  const V lo = V::broadcast(exp_lower_limit);
  const V xc = V::min(V::max(x, lo), V::zero());
  const V n = exp_power<V>(xc);
  const V result = V::select_lt(x, lo, V::zero(), exp_mantissa<V>(xc, n) * V::pow2(n));
  return V::select_nan(x, x, result);
}

// sum of exp(scale x[j] - m) for j < n, lanes past the end exp(-inf) = 0; each exp also stored into
// out[j] when out is not null (out may be x). scale > 0, and m = max_of(x, n, scale) (a row's largest
// scale x[j], as every caller passes), so no exponent is above 0: exp_nonpositive, exp's bits. (A row
// holding a NaN can lose its maximum in max_of, the lanes' max taking the later value after a NaN,
// and give positive exponents; its sum and results are NaN with either exp, only the NaNs' sign may
// differ, as it already did between variants.) Softmax over 128-wide causal rows took 0.82x (AVX2)
// and 0.84x (AVX-512) the time it took with exp (Xeon).
template <class V>
inline float exp_shifted(const float* x, float* out, std::int64_t n, float m, float scale = 1.0f) {
  const V mv = V::broadcast(m), minus_inf = V::broadcast(-__builtin_inff()), sv = V::broadcast(scale);
  V total = V::zero();
  for_blocks<V>(n, [&](std::int64_t i, int count) {
    const V e = exp_nonpositive<V>(load_or<V>(x + i, count, minus_inf) * sv - mv);
    if (out) store(e, out + i, count);
    total = total + e;
  });
  return total.sum();
}

template <class V>
inline void scale(float* x, std::int64_t n, float factor) {
  const V f = V::broadcast(factor);
  for_blocks<V>(n, [&](std::int64_t i, int count) { store(load<V>(x + i, count) * f, x + i, count); });
}

template <class V>
void softmax_forward(const float* x, float* out, std::int64_t n, std::int64_t kept, float x_scale) {
  if (kept > 0) {
    const float total = exp_shifted<V>(x, out, kept, max_of<V>(x, kept, x_scale), x_scale);
    scale<V>(out, kept, 1.0f / total);
  }
  for (std::int64_t j = kept; j < n; ++j) out[j] = 0.0f;
}

// Rows [first, first + R) of a causal block (see softmax_forward_causal), side by side: each row's
// maximum, then its exponentials and their total, then its scaling by 1 / total.
template <class V, int R>
inline void softmax_causal_rows(const float* x, float* out, std::int64_t first, std::int64_t n, float x_scale) {
  const V minus_inf = V::broadcast(-__builtin_inff()), sv = V::broadcast(x_scale);
  std::int64_t kept[R];
  V max[R], total[R], factor[R];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    kept[j] = first + j + 1 < n ? first + j + 1 : n;
    max[j] = minus_inf;
    total[j] = V::zero();
  }
  // The block a row's for_blocks would give it at offset i: 16 lanes, or the row's last few.
  const auto count_at = [](std::int64_t k, std::int64_t i) { return static_cast<int>(k - i < 16 ? k - i : 16); };
  const std::int64_t longest = kept[R - 1];
  for (std::int64_t i = 0; i < longest; i += 16) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      if (i < kept[j]) max[j] = V::max(max[j], load_or<V>(x + j * n + i, count_at(kept[j], i), minus_inf) * sv);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) max[j] = V::broadcast(max[j].max_lane());
  for (std::int64_t i = 0; i < longest; i += 16) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      if (i < kept[j]) {
        const int c = count_at(kept[j], i);
        const V e = exp_nonpositive<V>(load_or<V>(x + j * n + i, c, minus_inf) * sv - max[j]);
        store(e, out + j * n + i, c);
        total[j] = total[j] + e;
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) factor[j] = V::broadcast(1.0f / total[j].sum());
  for (std::int64_t i = 0; i < longest; i += 16) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      if (i < kept[j]) {
        const int c = count_at(kept[j], i);
        store(load<V>(out + j * n + i, c) * factor[j], out + j * n + i, c);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    for (std::int64_t col = kept[j]; col < n; ++col) out[j * n + col] = 0.0f;
  }
}

// Rows [0, rows) of a causal block of rows n floats long (row r keeps its first r + 1 entries, at
// most n), in place or not: softmax_forward's operations on each row, three rows at a time. One
// row's softmax is a chain (its maximum, then the exponentials, then their sum, then the scaling),
// and a row of attention's 128-wide blocks is short, so a row alone left the vector units waiting on
// that chain; neighbouring rows, whose lengths differ by one, run side by side in the same loops
// instead. Each row gets the operations softmax_forward gives it, in the same order: the same bits.
// 32 heads' 128 x 128 blocks took 0.71-0.74x (AVX2) and 0.84-0.90x (AVX-512) the time of the rows
// one by one (Xeon); 2 rows gave 0.82x / 0.90-0.94x, 4 rows 0.715x / 0.92x, 8 rows 0.84x / 1.16x.
template <class V>
void softmax_forward_causal(const float* x, float* out, std::int64_t rows, std::int64_t n, float x_scale) {
  constexpr int group = 3;
  std::int64_t r = 0;
  for (; r + group <= rows; r += group) softmax_causal_rows<V, group>(x + r * n, out + r * n, r, n, x_scale);
  for (; r < rows; ++r) softmax_forward<V>(x + r * n, out + r * n, n, r + 1 < n ? r + 1 : n, x_scale);
}

template <class V>
void softmax_backward(const float* y, const float* dy, float* dx, std::int64_t n, std::int64_t kept) {
  V dot = V::zero();
  for_blocks<V>(kept, [&](std::int64_t i, int count) { dot = V::fma(load<V>(y + i, count), load<V>(dy + i, count), dot); });
  const V d = V::broadcast(dot.sum());
  for_blocks<V>(kept, [&](std::int64_t i, int count) {
    store(load<V>(y + i, count) * (load<V>(dy + i, count) - d), dx + i, count);
  });
  for (std::int64_t j = kept; j < n; ++j) dx[j] = 0.0f;
}

// log(sum(exp(row))) - row[target]: the sum of exp(row - max) without storing it.
template <class V>
float cross_entropy_forward(const float* row, std::int64_t vocab, std::int64_t target) {
  const float m = max_of<V>(row, vocab);
  return m + __builtin_logf(exp_shifted<V>(row, nullptr, vocab, m)) - row[target];
}

template <class V>
void cross_entropy_backward(const float* row, float* out, std::int64_t vocab, std::int64_t target, float dloss) {
  const float m = max_of<V>(row, vocab);
  const float total = exp_shifted<V>(row, out, vocab, m);
  const float e_target = out[target];
  scale<V>(out, vocab, dloss / total);
  out[target] = e_target * (dloss / total) - dloss;
}

template <class V>
void adamw(float* param, float* m, float* v, const float* grad, std::int64_t n, const AdamWConstants& c) {
  const V beta1 = V::broadcast(c.beta1), beta2 = V::broadcast(c.beta2);
  const V one_minus_beta1 = V::broadcast(1.0f - c.beta1), one_minus_beta2 = V::broadcast(1.0f - c.beta2);
  const V bias1 = V::broadcast(c.bias_correction1), bias2 = V::broadcast(c.bias_correction2);
  const V lr = V::broadcast(c.lr), eps = V::broadcast(c.eps), decay = V::broadcast(c.decay);
  const V grad_scale = V::broadcast(c.grad_scale);
  for_blocks<V>(n, [&](std::int64_t i, int count) {
    const V g = load<V>(grad + i, count) * grad_scale;
    const V mi = beta1 * load<V>(m + i, count) + one_minus_beta1 * g;
    const V vi = beta2 * load<V>(v + i, count) + one_minus_beta2 * g * g;
    const V p = load<V>(param + i, count);
    store(mi, m + i, count);
    store(vi, v + i, count);
    store(p - decay * p - lr * (mi / bias1) / (V::sqrt(vi / bias2) + eps), param + i, count);
  });
}

// Plain loops over 16 double lanes, which the compiler vectorizes for each variant's registers;
// the lanes are reduced in V's tree.
template <class V>
double sum_of_squares(const float* x, std::int64_t n) {
  double lanes[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] += static_cast<double>(x[i + l]) * static_cast<double>(x[i + l]);
  }
  for (int l = 0; i + l < n; ++l) lanes[l] += static_cast<double>(x[i + l]) * static_cast<double>(x[i + l]);
  for (int l = 0; l < 8; ++l) lanes[l] += lanes[l + 8];
  for (int l = 0; l < 4; ++l) lanes[l] += lanes[l + 4];
  for (int l = 0; l < 2; ++l) lanes[l] += lanes[l + 2];
  return lanes[0] + lanes[1];
}

// Eight rows at a time, each column's running sum kept in a register across them: a load and
// store of the sums per eight rows rather than per row (the sums' stores bounded the one-row loop).
// Each column still adds its rows one by one in order, so the bits are the one-row loop's.
template <class V>
void column_sums(const float* a, std::int64_t rows, std::int64_t cols, std::int64_t ld, double* sums) {
  constexpr std::int64_t group = 8;
  std::int64_t r = 0;
  for (; r + group <= rows; r += group) {
    const float* row = a + r * ld;
    for (std::int64_t j = 0; j < cols; ++j) {
      double s = sums[j];
      for (std::int64_t g = 0; g < group; ++g) s += static_cast<double>(row[g * ld + j]);
      sums[j] = s;
    }
  }
  for (; r < rows; ++r) {
    const float* row = a + r * ld;
    for (std::int64_t j = 0; j < cols; ++j) sums[j] += static_cast<double>(row[j]);
  }
}

// A variant's table: its GEMM kernels (isa_sgemm_kernels.hpp: sgemm_kernels) and the bodies above
// instantiated for its V.
template <class V>
constexpr CpuKernels make_table(CpuIsa isa, const SgemmKernels& sgemm) {
  CpuKernels k;
  k.isa = isa;
  k.sgemm = sgemm;
  k.exp = exp_array<V>;
  k.gelu_forward = gelu_forward<V>;
  k.gelu_backward = gelu_backward<V>;
  k.add = add<V>;
  k.epilogue_row = epilogue_row<V>;
  k.layernorm_forward = layernorm_forward<V>;
  k.layernorm_backward = layernorm_backward<V>;
  k.layernorm_param_grads = layernorm_param_grads<V>;
  k.softmax_forward = softmax_forward<V>;
  k.softmax_forward_causal = softmax_forward_causal<V>;
  k.softmax_backward = softmax_backward<V>;
  k.cross_entropy_forward = cross_entropy_forward<V>;
  k.cross_entropy_backward = cross_entropy_backward<V>;
  k.adamw = adamw<V>;
  k.sum_of_squares = sum_of_squares<V>;
  k.column_sums = column_sums<V>;
  return k;
}

}  // namespace loom::kernels::cpu::isa
