#include "inner/cpu/attention.h"

#include <cmath>

#include "inner/cpu/blas.h"

namespace geoloco::inner::cpu {

namespace {
int I(std::size_t v) { return static_cast<int>(v); }
}  // namespace

void attention_forward(float* out, float* att, const float* qkv, std::size_t batch, std::size_t t, std::size_t c,
                       std::size_t heads) {
  const std::size_t hs = c / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const float* q = qkv + b * t * 3 * c + h * hs;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* a = att + (b * heads + h) * t * t;
      // scores = scale · q · kᵀ (the upper triangle is computed and then masked:
      // simpler than t small products, and sgemm is fast enough)
      gemm(false, true, I(t), I(t), I(hs), scale, q, I(3 * c), k, I(3 * c), 0.0f, a, I(t));
      for (std::size_t i = 0; i < t; ++i) {
        float* row = a + i * t;
        float max = row[0];
        for (std::size_t j = 1; j <= i; ++j) max = row[j] > max ? row[j] : max;
        float sum = 0.0f;
        for (std::size_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - max);  // minus the max: exp cannot overflow
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (std::size_t j = 0; j <= i; ++j) row[j] *= inv;
        for (std::size_t j = i + 1; j < t; ++j) row[j] = 0.0f;  // the causal mask
      }
      // out = att · v
      gemm(false, false, I(t), I(hs), I(t), 1.0f, a, I(t), v, I(3 * c), 0.0f, out + b * t * c + h * hs, I(c));
    }
  }
}

void attention_backward(float* d_qkv, float* scratch, const float* d_out, const float* qkv, const float* att,
                        std::size_t batch, std::size_t t, std::size_t c, std::size_t heads) {
  const std::size_t hs = c / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const float* q = qkv + b * t * 3 * c + h * hs;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = d_qkv + b * t * 3 * c + h * hs;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* a = att + (b * heads + h) * t * t;
      const float* dy = d_out + b * t * c + h * hs;
      float* da = scratch;
      // d_att = dy · vᵀ;  dv += attᵀ · dy
      gemm(false, true, I(t), I(t), I(hs), 1.0f, dy, I(c), v, I(3 * c), 0.0f, da, I(t));
      gemm(true, false, I(t), I(hs), I(t), 1.0f, a, I(t), dy, I(c), 1.0f, dv, I(3 * c));
      // Softmax backward, row by row: d_score_j = att_j · (d_att_j − Σ_k att_k d_att_k).
      // Masked entries have att = 0, so their d_score is 0 as it must be.
      for (std::size_t i = 0; i < t; ++i) {
        const float* arow = a + i * t;
        float* drow = da + i * t;
        float dot = 0.0f;
        for (std::size_t j = 0; j <= i; ++j) dot += arow[j] * drow[j];
        for (std::size_t j = 0; j <= i; ++j) drow[j] = arow[j] * (drow[j] - dot);
        for (std::size_t j = i + 1; j < t; ++j) drow[j] = 0.0f;
      }
      // scores = scale · q · kᵀ  ⇒  dq += scale · d_score · k;  dk += scale · d_scoreᵀ · q
      gemm(false, false, I(t), I(hs), I(t), scale, da, I(t), k, I(3 * c), 1.0f, dq, I(3 * c));
      gemm(true, false, I(t), I(hs), I(t), scale, da, I(t), q, I(3 * c), 1.0f, dk, I(3 * c));
    }
  }
}

}  // namespace geoloco::inner::cpu
