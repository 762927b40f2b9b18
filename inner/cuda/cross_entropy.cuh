// Softmax followed by the cross-entropy against integer targets, fused, on
// the device, mirroring inner/cpu/cross_entropy.h. The mean loss stays on the
// device (one double) so a training step can run without a host round trip;
// the caller copies it when it wants to print it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// Writes probs[n,v] and *loss (device memory, one double) = mean over rows
/// of −log softmax(logits)[target]. Per-row losses are computed in double
/// as the reference does and summed in a fixed tree order. Targets must lie
/// in [0, v) (checked by the caller). Uses ctx.scratch().
Status cross_entropy_forward(Context& ctx, float* probs, double* loss, const float* logits, const std::int32_t* targets,
                             std::size_t n, std::size_t v);
/// d_logits[n,v] += d_loss · (probs − onehot(target)) / n.
Status cross_entropy_backward(Context& ctx, float* d_logits, const float* probs, const std::int32_t* targets,
                              std::size_t n, std::size_t v, float d_loss = 1.0f);
/// *correct (device memory) += rows whose largest logit is the target (ties:
/// the first index wins, as in the reference).
Status count_correct(Context& ctx, unsigned long long* correct, const float* logits, const std::int32_t* targets,
                     std::size_t n, std::size_t v);

}  // namespace geoloco::inner::cuda
