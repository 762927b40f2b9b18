#include "inner/cpu/cross_entropy.h"

#include <cmath>

namespace geoloco::inner::cpu {

double cross_entropy_forward(float* probs, const float* logits, const std::int32_t* targets, std::size_t n,
                             std::size_t v) {
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float* z = logits + i * v;
    float* p = probs + i * v;
    float max = z[0];
    for (std::size_t j = 1; j < v; ++j) max = z[j] > max ? z[j] : max;
    float sum = 0.0f;
    for (std::size_t j = 0; j < v; ++j) {
      p[j] = std::exp(z[j] - max);
      sum += p[j];
    }
    const float inv = 1.0f / sum;
    for (std::size_t j = 0; j < v; ++j) p[j] *= inv;
    // −log p_target = log Σ exp(z − max) − (z_target − max): exact even when
    // p_target underflows to 0.
    const std::size_t y = static_cast<std::size_t>(targets[i]);
    total += std::log(static_cast<double>(sum)) - static_cast<double>(z[y] - max);
  }
  return total / static_cast<double>(n);
}

void cross_entropy_backward(float* d_logits, const float* probs, const std::int32_t* targets, std::size_t n,
                            std::size_t v, float d_loss) {
  const float scale = d_loss / static_cast<float>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t y = static_cast<std::size_t>(targets[i]);
    for (std::size_t j = 0; j < v; ++j) {
      const float onehot = j == y ? 1.0f : 0.0f;
      d_logits[i * v + j] += scale * (probs[i * v + j] - onehot);
    }
  }
}

std::size_t count_correct(const float* logits, const std::int32_t* targets, std::size_t n, std::size_t v) {
  std::size_t correct = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < v; ++j)
      if (logits[i * v + j] > logits[i * v + best]) best = j;
    if (best == static_cast<std::size_t>(targets[i])) ++correct;
  }
  return correct;
}

}  // namespace geoloco::inner::cpu
