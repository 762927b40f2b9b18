// A site's checkpoint of its job (<job dir>/checkpoint.safetensors): the
// held outer state, anchor and momentum of the last committed round, and
// this site's error-feedback residual, saved at the job's checkpoint rounds
// and at its end, and loaded when geolocod starts the job again.
//
// Saving moves the vectors into the file's writer and back, so no second
// copy of the model is made (a copy of the residual was once the job's peak
// memory). A checkpoint that cannot be read (torn, truncated, a digest that
// fails) is never loaded: it is moved aside as checkpoint.safetensors.damaged
// for a look, and the job takes the committed state from a peer instead. A
// checkpoint of another configuration of the job is refused: its anchor
// belongs to another model or another run.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/error_feedback.h"
#include "outer/checkpoint.h"
#include "outer/outer_state.h"

namespace geoloco::daemon {

/// What a site's checkpoint saves, viewed where it lies: the state's
/// anchor and momentum, and `site`'s residual from `feedback` when there is
/// one. Valid while neither changes (the state's vectors, the residual).
outer::CheckpointSource site_checkpoint_source(const outer::OuterState& state,
                                               const compression::ErrorFeedback* feedback, const std::string& site);

/// Saves `state` (nothing when it has no anchor yet) with `site`'s residual
/// from `feedback` when there is one, without copying either.
/// Errors: those of outer::save_checkpoint.
Status save_site_checkpoint(const std::filesystem::path& path, const outer::OuterState& state,
                            const compression::ErrorFeedback* feedback, const std::string& site,
                            const std::string& config_hash);

struct LoadedSiteCheckpoint {
  outer::OuterState state;                     ///< residuals cleared
  std::optional<std::vector<float>> residual;  ///< `site`'s, when saved and of the anchor's size
};
struct SiteCheckpointLoad {
  std::optional<LoadedSiteCheckpoint> loaded;  ///< empty: none there, or set aside
  std::string set_aside;                       ///< non-empty: why the file was set aside, and where it is
};
/// Loads the checkpoint at `path` if there is one. Errors: invalid_argument
/// (a checkpoint of another configuration: `config_hash` differs).
Result<SiteCheckpointLoad> load_site_checkpoint(const std::filesystem::path& path, const std::string& site,
                                                const std::string& config_hash, const std::string& job);

}  // namespace geoloco::daemon
