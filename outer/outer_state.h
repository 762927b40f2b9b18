// The outer state of one job on one site (docs/design.md §1, §10): the anchor θ_r,
// the outer momentum m, the round number r, and the error-feedback residual
// of each site this process holds (a daemon holds its own site's only; the
// simulator holds every site's). All fp32, 12 bytes per parameter per site.
//
// This is what a checkpoint saves (checkpoint.h) and what STATE_SYNC sends.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/layout.h"

namespace geoloco::outer {

/// One site's error-feedback residual e_s (docs/design.md §1 step 3).
struct SiteResidual {
  std::string site;           ///< the site's name, as in the job
  std::vector<float> values;  ///< one per parameter
};

struct OuterState {
  std::string job;              ///< the job's name
  std::uint64_t round = 0;      ///< r: rounds committed so far
  Layout layout;                ///< the flat anchor's tensors
  std::vector<float> anchor;    ///< θ_r, identical on every site
  std::vector<float> momentum;  ///< m, identical on every site
  std::vector<SiteResidual> residuals;

  /// A fresh state: anchor = initial, momentum and no residuals, round 0.
  /// Errors: invalid_argument (bad layout, or initial's size differs from it).
  static Result<OuterState> create(std::string job, Layout layout, std::vector<float> initial);

  /// Rules: a job name, a valid layout, anchor and momentum and every
  /// residual exactly as long as the layout, unique non-empty site names.
  /// Errors: invalid_argument naming the rule.
  Status validate() const;

  /// xxh3-64 of the anchor's fp32 bytes: what COMMIT compares.
  std::uint64_t anchor_digest() const;

  /// The residual of `site`, added zeroed on first use.
  std::vector<float>& residual(const std::string& site);
};

}  // namespace geoloco::outer
