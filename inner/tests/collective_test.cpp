// The intra-site collective: launcher environments, and the shared-memory
// implementation run as real processes with inputs whose answers have a
// closed form (gloo's style).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include "inner/collective/launch.h"
#include "inner/collective/shm_collective.h"
#include "inner/tests/fork_ranks.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;

namespace {

GetEnv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// In a child: joins the group from the environment, as geoloco-train does.
std::unique_ptr<Collective> join(ShmCollectiveOptions options = {}) {
  auto launch = launch_info_from_env();
  if (!launch.ok()) return nullptr;
  auto c = make_cpu_collective(*launch, options);
  if (!c.ok()) {
    std::fprintf(stderr, "join: %s\n", c.status().message().c_str());
    return nullptr;
  }
  return std::move(*c);
}

}  // namespace

TEST_CASE("launch info from geoloco, mpirun and srun environments", "[collective]") {
  auto none = launch_info_from_env(env_of({}));
  REQUIRE(none.ok());
  CHECK(none->size == 1);
  CHECK(none->launcher == "none");
  CHECK(none->run_id.rfind("ppid-", 0) == 0);

  auto g = launch_info_from_env(env_of({{"GEOLOCO_RANK", "1"}, {"GEOLOCO_WORLD_SIZE", "4"}, {"GEOLOCO_RUN_ID", "j7"}}));
  REQUIRE(g.ok());
  CHECK(g->rank == 1);
  CHECK(g->size == 4);
  CHECK(g->local_size == 4);
  CHECK(g->run_id == "j7");

  auto mpi = launch_info_from_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                          {"OMPI_COMM_WORLD_SIZE", "8"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                          {"OMPI_MCA_ess_base_jobid", "12345"}}));
  REQUIRE(mpi.ok());
  CHECK(mpi->launcher == "mpirun");
  CHECK(mpi->rank == 3);
  CHECK(mpi->local_rank == 1);
  CHECK(mpi->local_size == 2);
  CHECK(mpi->run_id == "ompi-12345");

  auto slurm = launch_info_from_env(env_of({{"SLURM_PROCID", "0"},
                                            {"SLURM_NTASKS", "2"},
                                            {"SLURM_NTASKS_PER_NODE", "2(x1)"},
                                            {"SLURM_JOB_ID", "99"},
                                            {"SLURM_STEP_ID", "3"}}));
  REQUIRE(slurm.ok());
  CHECK(slurm->launcher == "srun");
  CHECK(slurm->size == 2);
  CHECK(slurm->local_size == 2);
  CHECK(slurm->run_id == "slurm-99.3");

  auto half = launch_info_from_env(env_of({{"SLURM_PROCID", "0"}}));
  CHECK(half.status().code() == Err::invalid_argument);
  CHECK(half.status().message() == "SLURM_PROCID is set but SLURM_NTASKS is not; the launcher must set both");
  auto junk = launch_info_from_env(env_of({{"GEOLOCO_RANK", "x1"}, {"GEOLOCO_WORLD_SIZE", "2"}}));
  CHECK(junk.status().message() == "GEOLOCO_RANK='x1' is not a non-negative integer");
  auto outside = launch_info_from_env(env_of({{"GEOLOCO_RANK", "2"}, {"GEOLOCO_WORLD_SIZE", "2"}}));
  CHECK(outside.status().message() == "GEOLOCO_RANK=2 is not below GEOLOCO_WORLD_SIZE=2");

  // Several nodes need NCCL: the CPU collective says so instead of hanging.
  auto multi = make_cpu_collective(*mpi);
  CHECK(multi.status().code() == Err::unsupported);
}

TEST_CASE("shm all-reduce sums in rank order, in pieces, on 3 processes", "[collective]") {
  auto codes = fork_ranks(3, [](int rank) {
    ShmCollectiveOptions o;
    o.slot_floats = 7;  // 50 floats travel in 8 pieces
    o.timeout_ms = 20'000;
    auto c = join(o);
    if (!c || c->rank() != rank || c->size() != 3) return 1;
    std::vector<float> x(50);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank * 1000 + static_cast<int>(i));
    if (!c->allreduce_sum(x).ok()) return 2;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i] != static_cast<float>(3000 + 3 * i)) return 3;  // 0 + 1000 + 2000 + 3i
    // Order matters in fp32: rank order gives (1e8 + 1) − 1e8 = 0 because
    // 1e8 + 1 rounds to 1e8; the order (x0 + x2) + x1 would give 1.
    std::vector<float> y = {rank == 0 ? 1e8f : rank == 1 ? 1.0f : -1e8f};
    if (!c->allreduce_sum(y).ok() || y[0] != 0.0f) return 4;
    std::vector<float> avg = {static_cast<float>(rank)};
    if (!c->allreduce_average(avg).ok() || avg[0] != 1.0f) return 5;
    std::vector<float> b(20, static_cast<float>(rank));
    if (!c->broadcast(b, 1).ok()) return 6;
    for (float v : b)
      if (v != 1.0f) return 7;
    if (!c->barrier().ok()) return 8;
    return 0;
  });
  CHECK(codes == std::vector<int>{0, 0, 0});
}

TEST_CASE("shm collective: ranks that disagree on sizes get an error, not a hang", "[collective]") {
  auto codes = fork_ranks(2, [](int rank) {
    ShmCollectiveOptions o;
    o.timeout_ms = 20'000;
    auto c = join(o);
    if (!c) return 1;
    std::vector<float> x(rank == 0 ? 10 : 11, 1.0f);
    auto s = c->allreduce_sum(x);
    if (s.ok()) return 2;
    return s.message().find("called op 1 on") != std::string::npos ? 0 : 3;
  });
  CHECK(codes == std::vector<int>{0, 0});
}

TEST_CASE("shm collective: a peer that exits is noticed well before the timeout", "[collective]") {
  const auto start = std::chrono::steady_clock::now();
  auto codes = fork_ranks(2, [](int rank) {
    ShmCollectiveOptions o;
    o.timeout_ms = 30'000;
    auto c = join(o);
    if (!c) return 1;
    if (rank == 1) return 0;  // leaves without the all-reduce
    std::vector<float> x(4, 1.0f);
    auto s = c->allreduce_sum(x);
    return !s.ok() && s.message().find("has exited") != std::string::npos ? 0 : 2;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Rank 1 is a zombie until reaped; fork_ranks reaps it within milliseconds.
  CHECK(codes == std::vector<int>{0, 0});
  CHECK(seconds < 10.0);
}

TEST_CASE("shm collective: a missing peer times out with a message", "[collective]") {
  ShmCollectiveOptions o;
  o.timeout_ms = 200;
  auto c = ShmCollective::create("geoloco-test-lonely-" + std::to_string(::getpid()), 0, 2, o);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Err::timeout);
  CHECK(c.status().message().find("only 0 of 1 peers attached") != std::string::npos);
  auto bad = ShmCollective::create("no/slashes", 0, 2, o);
  CHECK(bad.status().code() == Err::invalid_argument);
}
