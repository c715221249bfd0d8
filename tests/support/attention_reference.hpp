// Causal multi-head attention computed directly in fp64: the independent reference for every
// attention kernel's tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace loom::test {

// out [B, T, C] of causal attention over qkv [B, T, 3C] with nh heads, in fp64.
inline std::vector<double> attention64(const std::vector<double>& qkv, std::size_t batch, std::size_t steps, std::size_t channels,
                                std::size_t heads) {
  const std::size_t hs = channels / heads, width = 3 * channels;
  std::vector<double> out(batch * steps * channels, 0.0);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t t = 0; t < steps; ++t) {
        std::vector<double> scores(t + 1);
        double m = -INFINITY;
        for (std::size_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (std::size_t i = 0; i < hs; ++i) {
            dot += qkv[(b * steps + t) * width + h * hs + i] * qkv[(b * steps + u) * width + channels + h * hs + i];
          }
          scores[u] = dot / std::sqrt(static_cast<double>(hs));
          m = std::max(m, scores[u]);
        }
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - m));
        for (std::size_t u = 0; u <= t; ++u) {
          for (std::size_t i = 0; i < hs; ++i) {
            out[(b * steps + t) * channels + h * hs + i] +=
                scores[u] / sum * qkv[(b * steps + u) * width + 2 * channels + h * hs + i];
          }
        }
      }
    }
  }
  return out;
}

// lse [B, NH, T]: log sum_u exp(q_t k_u / sqrt(hs)) over u <= t, in fp64.
inline std::vector<double> attention_lse64(const std::vector<double>& qkv, std::size_t batch, std::size_t steps,
                                           std::size_t channels, std::size_t heads) {
  const std::size_t hs = channels / heads, width = 3 * channels;
  std::vector<double> lse(batch * heads * steps);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t t = 0; t < steps; ++t) {
        std::vector<double> scores(t + 1);
        for (std::size_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (std::size_t i = 0; i < hs; ++i) {
            dot += qkv[(b * steps + t) * width + h * hs + i] * qkv[(b * steps + u) * width + channels + h * hs + i];
          }
          scores[u] = dot / std::sqrt(static_cast<double>(hs));
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double s : scores) sum += std::exp(s - m);
        lse[(b * heads + h) * steps + t] = m + std::log(sum);
      }
    }
  }
  return lse;
}

}  // namespace loom::test
