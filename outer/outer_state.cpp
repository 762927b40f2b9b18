#include "outer/outer_state.h"

#include <set>

#include "common/digest.h"

namespace geoloco::outer {

Result<OuterState> OuterState::create(std::string job, Layout layout, std::vector<float> initial) {
  OuterState s;
  s.job = std::move(job);
  s.layout = std::move(layout);
  s.anchor = std::move(initial);
  s.momentum.assign(s.anchor.size(), 0.0f);
  GEOLOCO_TRY(s.validate());
  return s;
}

Status OuterState::validate() const {
  GEOLOCO_RETURN_IF(job.empty(), Err::invalid_argument, "outer state: the job name is empty");
  GEOLOCO_TRY(check_layout(layout));
  const std::uint64_t n = layout_values(layout);
  GEOLOCO_RETURN_IF(anchor.size() != n, Err::invalid_argument, "outer state: anchor has ", anchor.size(),
                    " values but the layout has ", n);
  GEOLOCO_RETURN_IF(momentum.size() != n, Err::invalid_argument, "outer state: momentum has ", momentum.size(),
                    " values but the layout has ", n);
  std::set<std::string> sites;
  for (const auto& r : residuals) {
    GEOLOCO_RETURN_IF(r.site.empty(), Err::invalid_argument, "outer state: a residual has an empty site name");
    GEOLOCO_RETURN_IF(!sites.insert(r.site).second, Err::invalid_argument, "outer state: site '", r.site,
                      "' has two residuals");
    GEOLOCO_RETURN_IF(r.values.size() != n, Err::invalid_argument, "outer state: residual of site '", r.site, "' has ",
                      r.values.size(), " values but the layout has ", n);
  }
  return {};
}

std::uint64_t OuterState::anchor_digest() const { return digest_f32(anchor); }

std::vector<float>& OuterState::residual(const std::string& site) {
  for (auto& r : residuals) {
    if (r.site == site) return r.values;
  }
  residuals.push_back({site, std::vector<float>(anchor.size(), 0.0f)});
  return residuals.back().values;
}

}  // namespace geoloco::outer
