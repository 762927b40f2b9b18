// The outer optimizer, applied identically on every site.
//
//   Nesterov (DiLoCo):  m ← μ m + Δ;  θ ← θ − η (Δ + μ m)      (η = 0.7, μ = 0.9)
//   SGD (heavy ball):   m ← μ m + Δ;  θ ← θ − η m              (η = 1, μ = 0: model averaging)
//
// with Δ optionally scaled down so that its global L2 norm is at most
// `clip_norm`. The arithmetic is fp32, elementwise, in a fixed order and
// compiled without contraction (-ffp-contract=off), so sites with different
// CPUs produce the same bits. The step works on any range, so a daemon can
// apply it chunk by chunk as the all-gather delivers Δ; only the clipping
// scale needs the whole Δ, and it is computed from the squares summed chunk
// after chunk in the exchange's order (add_squares, exchange.h).
#pragma once

#include <span>

#include "common/status.h"

namespace geoloco::diloco {

enum class OuterAlgorithm { nesterov, sgd };

struct OuterOptimizerOptions {
  /// nesterov (DiLoCo's) or sgd (heavy-ball momentum; with μ = 0 plain SGD).
  OuterAlgorithm algorithm = OuterAlgorithm::nesterov;
  /// η: dimensionless multiplier of the pseudo-gradient, in (0, 10].
  double learning_rate = 0.7;
  /// μ: momentum coefficient, in [0, 1).
  double momentum = 0.9;
  /// Largest allowed L2 norm of Δ (same units as the parameters); a larger Δ
  /// is scaled down to it. 0 turns clipping off.
  double clip_norm = 0.0;

  /// Plain SGD with η = 1, μ = 0: θ_{r+1} is the weighted mean of the sites' θ_s.
  static OuterOptimizerOptions averaging() { return {OuterAlgorithm::sgd, 1.0, 0.0, 0.0}; }

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

/// The factor Δ is multiplied by: min(1, clip_norm / norm), 1 when clipping
/// is off or Δ is zero. `norm` is ||Δ||_2.
float clip_scale(double norm, double clip_norm);

/// Σ Δ_i², accumulated in double in index order.
double squared_norm(std::span<const float> delta);
/// sum + Σ v², in order: squared_norm of a tensor given piece by piece, the
/// same double bit for bit as squared_norm of the whole.
double add_squares(double sum, std::span<const float> values);

/// One outer step on a range of the parameters: updates `anchor` and
/// `momentum` in place from `delta` multiplied by `scale` (clip_scale()).
/// Errors: invalid_argument (lengths differ, or options break validate()),
/// non_finite (Δ holds NaN or Inf: refused before anything changes).
Status outer_step(std::span<float> anchor, std::span<float> momentum, std::span<const float> delta,
                  const OuterOptimizerOptions& options, float scale = 1.0f);

/// The anchor outer_step() would leave, written to `out` (as long as the
/// anchor), with anchor and momentum unchanged: the same operations in the
/// same order, bit for bit; the digest a site commits to before it applies
/// a round is computed from it. Errors: outer_step()'s, invalid_argument
/// (out's length).
Status outer_stepped_anchor(std::span<const float> anchor, std::span<const float> momentum,
                            std::span<const float> delta, const OuterOptimizerOptions& options, float scale,
                            std::span<float> out);

}  // namespace geoloco::diloco
