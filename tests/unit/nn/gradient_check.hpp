// Directional finite differences for the nn tests: for a tensor X with analytic gradient G of a
// scalar objective f, compares (f(X + h V) - f(X - h V)) / 2h, evaluated in double from the fp32
// forward, with <G, V> for a random sign pattern V. A wrong or missing gradient term moves the
// two far apart; the tolerance covers fp32 rounding of the forward and the O(h^2) error.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "loom/core/tensor.hpp"

namespace loom::test {

struct DirectionalCheck {
  double numeric = 0, analytic = 0;
};

// value: a CPU f32 tensor the objective reads; grad: its analytic gradient (f32, same numel).
inline DirectionalCheck directional_derivative(const Tensor& value, const Tensor& grad,
                                               const std::function<double()>& objective, std::mt19937& rng,
                                               double h) {
  const std::span<float> x = value.span<float>();
  const std::vector<float> g = grad.to_vector<float>();
  std::vector<float> original(x.begin(), x.end());
  std::vector<float> direction(x.size());
  std::bernoulli_distribution coin(0.5);
  DirectionalCheck check;
  for (std::size_t i = 0; i < x.size(); ++i) {
    direction[i] = coin(rng) ? 1.0f : -1.0f;
    check.analytic += static_cast<double>(g[i]) * direction[i];
  }
  auto shifted = [&](double step) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(original[i] + step * direction[i]);
    return objective();
  };
  check.numeric = (shifted(h) - shifted(-h)) / (2 * h);
  std::copy(original.begin(), original.end(), x.begin());
  return check;
}

inline void require_directional(const std::string& what, const DirectionalCheck& c, double rel, double abs) {
  INFO(what << ": finite difference " << c.numeric << ", analytic " << c.analytic);
  REQUIRE(std::isfinite(c.analytic));
  REQUIRE(std::fabs(c.numeric - c.analytic) <= abs + rel * std::fabs(c.numeric));
}

}  // namespace loom::test
