// What a job tells its site's trainer: the phase plan its WELCOME carries
// (geoloco.torch takes the job's phases from there), as a pure function of
// the job file. JobRun's trainer wiring (job_trainer.cpp) uses it; the
// built-in trainer's process arguments are job/job_trainer.h's.
#pragma once

#include "inner/protocol/message.h"
#include "job/job_spec.h"

namespace geoloco::daemon {

/// The job's inner phases: H steps (or seconds, with at least min_steps),
/// Streaming DiLoCo's τ, α and merge, and the job's stop after rounds.
inner::protocol::PhasePlan phase_plan_of(const job::JobSpec& spec);

}  // namespace geoloco::daemon
