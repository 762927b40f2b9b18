// Softmax followed by the cross-entropy against integer targets, fused
// (the gradient through both is simply probs − onehot):
//   loss = mean_i −log softmax(logits_i)[target_i]
#pragma once

#include <cstddef>
#include <cstdint>

namespace geoloco::inner::cpu {

/// Writes probs[n,v] and returns the mean loss (summed in double, in row
/// order). Targets must lie in [0, v).
double cross_entropy_forward(float* probs, const float* logits, const std::int32_t* targets, std::size_t n,
                             std::size_t v);
/// d_logits[n,v] += d_loss · (probs − onehot(target)) / n.
void cross_entropy_backward(float* d_logits, const float* probs, const std::int32_t* targets, std::size_t n,
                            std::size_t v, float d_loss = 1.0f);

/// Rows whose largest logit is the target (ties: the first index wins).
std::size_t count_correct(const float* logits, const std::int32_t* targets, std::size_t n, std::size_t v);

}  // namespace geoloco::inner::cpu
