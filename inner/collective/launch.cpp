#include "inner/collective/launch.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace geoloco::inner {

namespace {

Result<int> parse_int(const char* name, const char* value) {
  int v = 0;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, v);
  GEOLOCO_RETURN_IF(ec != std::errc() || p != end || p == value || v < 0, Err::invalid_argument, name, "='", value,
                    "' is not a non-negative integer");
  return v;
}

}  // namespace

Result<LaunchInfo> launch_info_from_env(const GetEnv& getenv) {
  struct Launcher {
    const char* name;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
  };
  static const Launcher launchers[] = {
      {"geoloco", "GEOLOCO_RANK", "GEOLOCO_WORLD_SIZE", "GEOLOCO_LOCAL_RANK", "GEOLOCO_LOCAL_WORLD_SIZE"},
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  LaunchInfo info;
  for (const Launcher& l : launchers) {
    const char* rank = getenv(l.rank);
    const char* size = getenv(l.size);
    if (rank == nullptr && size == nullptr) continue;
    GEOLOCO_RETURN_IF(rank == nullptr || size == nullptr, Err::invalid_argument, rank ? l.rank : l.size, " is set but ",
                      rank ? l.size : l.rank, " is not; the launcher must set both");
    auto r = parse_int(l.rank, rank);
    if (!r.ok()) return r.status();
    auto s = parse_int(l.size, size);
    if (!s.ok()) return s.status();
    GEOLOCO_RETURN_IF(*s < 1 || *r >= *s, Err::invalid_argument, l.rank, "=", *r, " is not below ", l.size, "=", *s);
    info.rank = *r;
    info.size = *s;
    info.launcher = l.name;
    info.local_rank = info.rank;
    info.local_size = info.size;
    if (const char* lr = getenv(l.local_rank)) {
      auto v = parse_int(l.local_rank, lr);
      if (!v.ok()) return v.status();
      info.local_rank = *v;
    }
    if (const char* ls = getenv(l.local_size)) {
      // Slurm writes SLURM_NTASKS_PER_NODE as "2" or "2(x3)"; the leading number is what we need.
      std::string digits;
      for (const char* p = ls; *p >= '0' && *p <= '9'; ++p) digits += *p;
      auto v = parse_int(l.local_size, digits.empty() ? ls : digits.c_str());
      if (!v.ok()) return v.status();
      info.local_size = *v;
    }
    break;
  }
  if (const char* id = getenv("GEOLOCO_RUN_ID")) {
    info.run_id = id;
  } else if (const char* job = getenv("SLURM_JOB_ID")) {
    const char* step = getenv("SLURM_STEP_ID");
    info.run_id = cat("slurm-", job, ".", step ? step : "0");
  } else if (const char* ompi = getenv("OMPI_MCA_ess_base_jobid")) {
    info.run_id = cat("ompi-", ompi);
  } else {
    info.run_id = cat("ppid-", ::getppid());
  }
  return info;
}

Result<LaunchInfo> launch_info_from_env() {
  return launch_info_from_env([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace geoloco::inner
