// Where this worker sits in its site's group, as the launcher said it in the
// environment. Three launchers are understood, first match wins:
//
//   geoloco-train --workers / the daemon: GEOLOCO_RANK, GEOLOCO_WORLD_SIZE
//   mpirun (Open MPI):                    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   srun (Slurm):                         SLURM_PROCID, SLURM_NTASKS
//
// None set means a single worker. The local rank (which GPU to use) and the
// processes on this node come from OMPI_COMM_WORLD_LOCAL_RANK/_LOCAL_SIZE or
// SLURM_LOCALID/SLURM_NTASKS_PER_NODE-style variables when present.
//
// The run id names the group's rendezvous (the shared-memory segment of the
// CPU collective, NCCL's unique id file later): GEOLOCO_RUN_ID, else
// Slurm's job.step, else Open MPI's job id, else the parent process id (the
// launcher that forked the workers on this node).
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace geoloco::inner {

struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string launcher = "none";  ///< "geoloco", "mpirun", "srun", "none"
  std::string run_id;
};

using GetEnv = std::function<const char*(const char*)>;

/// Reads the variables through `getenv` (tests pass a map).
/// Errors: invalid_argument naming the variable: not an integer, a size
/// without a rank (or the reverse), rank outside [0, size).
Result<LaunchInfo> launch_info_from_env(const GetEnv& getenv);

/// The same with the process environment.
Result<LaunchInfo> launch_info_from_env();

}  // namespace geoloco::inner
