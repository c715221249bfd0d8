// src/comm/mpi/combine.hpp: the element-wise reductions of the MPI collectives against a plain
// loop, every dtype and op, in place, and the operand order they promise.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "src/comm/mpi/combine.hpp"

using loom::DType;
using loom::comm::ReduceOp;
using loom::comm::detail::combine;
using loom::comm::detail::combine_in_order;

namespace {

template <class T>
T apply(ReduceOp op, T a, T b) {
  if (op == ReduceOp::max) return a < b ? b : a;
  if (op == ReduceOp::min) return b < a ? b : a;
  return a + b;
}

template <class T>
std::vector<T> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<T> out(static_cast<std::size_t>(n));
  for (T& v : out) {
    if constexpr (std::is_floating_point_v<T>) v = std::uniform_real_distribution<T>(-3, 3)(rng);
    else v = static_cast<T>(std::uniform_int_distribution<int>(-1000, 1000)(rng));
  }
  return out;
}

template <class T>
void check_dtype(DType dtype) {
  // Lengths around the vector widths and the in-order reduction's 2048-element chunks.
  for (std::int64_t n : {0, 1, 15, 16, 17, 2047, 2048, 4100}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      INFO("n " << n << " op " << static_cast<int>(op));
      const auto a = random_values<T>(n, 1), b = random_values<T>(n, 2), c = random_values<T>(n, 3);
      std::vector<T> out(static_cast<std::size_t>(n), T{-7});
      combine(out.data(), a.data(), b.data(), n, dtype, op);
      for (std::int64_t i = 0; i < n; ++i) REQUIRE(out[i] == apply(op, a[i], b[i]));

      std::vector<T> in_place = a;  // out is the first operand
      combine(in_place.data(), in_place.data(), b.data(), n, dtype, op);
      REQUIRE(in_place == out);

      // Three inputs in order, written over the middle one (a rank's own input is anywhere).
      std::vector<T> middle = b;
      const void* inputs[] = {a.data(), middle.data(), c.data()};
      combine_in_order(middle.data(), inputs, n, dtype, op);
      for (std::int64_t i = 0; i < n; ++i) REQUIRE(middle[i] == apply(op, apply(op, a[i], b[i]), c[i]));
    }
  }
}

}  // namespace

TEST_CASE("combine and combine_in_order match a plain loop for f32, i32 and i64", "[comm][mpi]") {
  check_dtype<float>(DType::f32);
  check_dtype<std::int32_t>(DType::i32);
  check_dtype<std::int64_t>(DType::i64);
}

TEST_CASE("combine keeps its operands' order: float sums in a different order differ", "[comm][mpi]") {
  // (1e8 + -1e8) + 1 == 1, but 1e8 + (-1e8 + 1) == 0 in f32: combine_in_order adds left to right.
  const float a[] = {1e8f}, b[] = {-1e8f}, c[] = {1.0f};
  float out[1];
  const void* abc[] = {a, b, c};
  combine_in_order(out, abc, 1, DType::f32, ReduceOp::sum);
  REQUIRE(out[0] == 1.0f);
  const void* bca[] = {b, c, a};
  combine_in_order(out, bca, 1, DType::f32, ReduceOp::sum);
  REQUIRE(out[0] == 0.0f);
}

TEST_CASE("combine refuses a dtype the MPI collectives do not reduce", "[comm][mpi]") {
  std::uint16_t x[1] = {0};
  REQUIRE_THROWS_WITH(combine(x, x, x, 1, DType::f16, ReduceOp::sum), Catch::Contains("cannot reduce dtype f16"));
}
