#include "daemon/site_checkpoint.h"

#include "outer/checkpoint.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;

outer::CheckpointSource site_checkpoint_source(const outer::OuterState& state,
                                               const compression::ErrorFeedback* feedback, const std::string& site) {
  outer::CheckpointSource source{state.job, state.round, state.layout, state.anchor, state.momentum, {}};
  if (feedback) source.residuals.emplace_back(site, feedback->residual());
  return source;
}

Status save_site_checkpoint(const fs::path& path, const outer::OuterState& state,
                            const compression::ErrorFeedback* feedback, const std::string& site,
                            const std::string& config_hash) {
  if (state.anchor.empty()) return {};
  return outer::save_checkpoint(path, site_checkpoint_source(state, feedback, site), config_hash);
}

Result<SiteCheckpointLoad> load_site_checkpoint(const fs::path& path, const std::string& site,
                                                const std::string& config_hash, const std::string& job) {
  SiteCheckpointLoad out;
  if (!fs::exists(path)) return out;
  auto loaded = outer::load_checkpoint(path);
  if (!loaded.ok()) {
    fs::path aside = path;
    aside += ".damaged";
    std::error_code ec;
    fs::rename(path, aside, ec);
    out.set_aside =
        cat(path.string(), " cannot be used (", loaded.status().message(), "); ",
            ec ? cat("it could not be moved aside: ", ec.message()) : cat("it is kept as ", aside.string()));
    return out;
  }
  GEOLOCO_RETURN_IF(loaded->config_hash != config_hash, Err::invalid_argument,
                    "a checkpoint of another configuration of job '", job, "' is at ", path.string(),
                    ": remove that folder, or give the changed job another name");
  LoadedSiteCheckpoint c;
  c.state = std::move(loaded->state);
  for (auto& r : c.state.residuals)
    if (r.site == site && r.values.size() == c.state.anchor.size()) c.residual = std::move(r.values);
  c.state.residuals.clear();
  out.loaded = std::move(c);
  return out;
}

}  // namespace geoloco::daemon
