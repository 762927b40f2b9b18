// Reads the parts of a job file (docs/design.md §6) that the outer engine owns:
//
//   inner:                  # shared with the trainer; only these keys are read here
//     steps: 500            # H, or
//     duration: 90s         # a time budget per inner phase (s, m, h; a bare number is seconds)
//     min_steps: 1
//   outer:
//     optimizer: nesterov   # nesterov | sgd
//     lr: 0.7
//     momentum: 0.9
//     clip: 0               # max L2 norm of Δ, 0 = off
//     weighting: tokens     # tokens | uniform
//   streaming:
//     fragments: 1
//     overlap: 0            # τ, inner steps
//     alpha: 0.0
//     merge: replace        # replace (α blend) | delayed (keep the local progress: the
//                           # delayed outer step; overlap then defaults to H − 1, or H/F)
//   straggler:              # deadline and min_sites are the coordinator's, read by the daemon
//     policy: carry         # carry | drop
//     decay: 0.5
//     max_rounds_late: 16
//
// YAML only fills the option structs; their validate() rules then apply.
// Every problem is reported, all in one message, each as
// "file:line:column: what was expected".
#pragma once

#include <filesystem>
#include <string_view>

#include "common/status.h"
#include "diloco/fragments.h"
#include "diloco/outer_step.h"
#include "diloco/phase.h"
#include "diloco/straggler.h"

namespace YAML {
class Node;
}

namespace geoloco::outer {

struct OuterJobConfig {
  diloco::InnerPhaseOptions inner;
  diloco::OuterOptimizerOptions outer;
  diloco::Weighting weighting = diloco::Weighting::tokens;
  diloco::StreamingOptions streaming;
  diloco::StragglerOptions straggler;

  /// Every component's rules, streaming's against inner.steps.
  Status validate() const;
};

/// Reads the sections above from a parsed job document; absent sections and
/// keys keep their defaults. `source` names the file in messages. Errors:
/// invalid_argument, listing every problem with its line and column.
Result<OuterJobConfig> parse_outer_job_yaml(const YAML::Node& job, std::string_view source);

/// Loads and parses a job file. Errors: io (unreadable), invalid_argument
/// (YAML syntax, or the problems parse_outer_job_yaml reports).
Result<OuterJobConfig> load_outer_job_file(const std::filesystem::path& path);

}  // namespace geoloco::outer
