// TrainerHost and TrainerProcess with the real geoloco-train (GEOLOCO_TRAIN_BINARY,
// the mlp on Fashion-MNIST at a tiny size): the test's coroutine plays the
// round engine. Bounds on how far H AdamW steps can move a value come from
// AdamW itself: each step moves a value by at most about lr · |m̂/√v̂| (a few
// lr) plus a weight decay of lr · wd · |θ|.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "daemon/trainer/tests/run_on.h"
#include "daemon/trainer/trainer_host.h"
#include "daemon/trainer/trainer_process.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;
using geoloco::daemon::test::eventually;
namespace protocol = geoloco::inner::protocol;

namespace {

constexpr std::uint64_t kBatch = 16;
constexpr double kLr = 1e-3;

// A job folder of its own per test: <tmp>/jobs/<job>/{sync.sock, trainer.log}.
struct JobDir {
  std::filesystem::path dir;
  JobDir() {
    char tmpl[] = "/tmp/geoloco-trainer-XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~JobDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  std::string socket() const { return (dir / "sync.sock").string(); }
  std::string log() const { return (dir / "trainer.log").string(); }
};

TrainerHostOptions host_options(const JobDir& d) {
  TrainerHostOptions o;
  o.socket_path = d.socket();
  o.job = "mlp-job";
  return o;
}

TrainerProcessOptions process_options(const JobDir& d, std::uint64_t sync_every) {
  TrainerProcessOptions o;
  o.program = GEOLOCO_TRAIN_BINARY;
  o.socket_path = d.socket();
  o.job = "mlp-job";
  o.log_path = d.log();
  o.model = "mlp";
  o.steps = 100'000;  // the host says stop long before
  o.batch = kBatch;
  o.lr = kLr;
  o.seed = 7;
  o.sync_every = sync_every;
  o.eval_limit = 200;
  o.restart_backoff_ms = 100;
  o.max_backoff_ms = 400;
  o.poll_interval_ms = 20;
  o.stop_grace_ms = 3000;
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// --- engines --------------------------------------------------------------

// Rounds 1..3 with anchor ← (anchor + replica) / 2; stop after round 3.
asio::awaitable<void> engine_three_rounds(TrainerHost& host, TrainerProcess& process, std::uint64_t h) {
  auto init = co_await host.initial_parameters();
  REQUIRE(init.ok());
  REQUIRE(init->size() > 1000);
  CHECK(all_finite(*init));
  REQUIRE(host.publish_initial(*init).ok());
  std::vector<float> anchor = std::move(*init);
  for (std::uint64_t r = 1; r <= 3; ++r) {
    auto phase = co_await host.next_phase();
    REQUIRE(phase.ok());
    CHECK(phase->round == r);
    CHECK(phase->tokens == h * kBatch);  // samples of H steps
    CHECK(std::isfinite(phase->loss));
    CHECK(phase->loss > 0);
    REQUIRE(phase->replica.size() == anchor.size());
    CHECK(max_abs_diff(phase->replica, anchor) > 0);  // it trained
    for (std::size_t i = 0; i < anchor.size(); ++i) anchor[i] = 0.5f * (anchor[i] + phase->replica[i]);
    REQUIRE(host.finish_round(anchor, r == 3).ok());
  }
  const TrainerProcess::State state = co_await process.wait_done();
  CHECK(state == TrainerProcess::State::finished);
  CHECK(process.last_exit() == 0);
  CHECK(process.restarts() == 0);
  CHECK(host.stats().hellos == 1);
  CHECK(host.stats().rounds == 3);
}

// The engine moves the anchor away from the replica by ±0.1 per value, far
// more than H steps can move it: the next replica must lie within the AdamW
// bound of that anchor, so the trainer continued from what the host wrote.
asio::awaitable<void> engine_shifted_anchor(TrainerHost& host, TrainerProcess& process, std::uint64_t h,
                                            std::vector<float>& distances) {
  auto init = co_await host.initial_parameters();
  REQUIRE(init.ok());
  REQUIRE(host.publish_initial(*init).ok());
  std::vector<float> anchor = std::move(*init);
  std::vector<float> previous;
  for (std::uint64_t r = 0; r < 3; ++r) {
    auto phase = co_await host.next_phase();
    REQUIRE(phase.ok());
    CHECK(phase->round == r);
    distances.push_back(max_abs_diff(phase->replica, anchor));
    if (!previous.empty()) CHECK(max_abs_diff(phase->replica, previous) > 0.05f);
    previous.assign(phase->replica.begin(), phase->replica.end());
    for (std::size_t i = 0; i < anchor.size(); ++i) anchor[i] = phase->replica[i] + (i % 2 ? 0.1f : -0.1f);
    REQUIRE(host.finish_round(anchor, r == 2).ok());
  }
  const TrainerProcess::State state = co_await process.wait_done();
  CHECK(state == TrainerProcess::State::finished);
  (void)h;
}

// Kills the trainer right after round 1's RESULT, while it trains round 2.
asio::awaitable<void> engine_kill_mid_phase(TrainerHost& host, TrainerProcess& process, pid_t& killed,
                                            std::vector<std::uint64_t>& rounds) {
  auto init = co_await host.initial_parameters();
  REQUIRE(init.ok());
  REQUIRE(host.publish_initial(*init).ok());
  std::vector<float> anchor = std::move(*init);
  for (std::uint64_t r = 0; r < 4; ++r) {
    auto phase = co_await host.next_phase();
    REQUIRE(phase.ok());
    rounds.push_back(phase->round);
    if (r == 2) {
      // Round 2 came from the restarted trainer, welcomed with round 1's anchor.
      CHECK(process.restarts() == 1);
      CHECK(process.pid() != killed);
      CHECK(host.trainer_pid() == process.pid());
      CHECK(host.stats().hellos == 2);
      CHECK(host.stats().departures == 1);
    }
    for (std::size_t i = 0; i < anchor.size(); ++i) anchor[i] = 0.5f * (anchor[i] + phase->replica[i]);
    REQUIRE(host.finish_round(anchor, r == 3).ok());
    if (r == 1) {
      killed = process.pid();
      REQUIRE(killed > 0);
      ::kill(killed, SIGKILL);  // the child this test started, by pid
    }
  }
  const TrainerProcess::State state = co_await process.wait_done();
  CHECK(state == TrainerProcess::State::finished);
  CHECK(process.last_exit() == 0);
  CHECK(host.stats().discarded_partial_rounds == 0);
}

asio::awaitable<void> engine_stop_waiting_trainer(TrainerHost& host, TrainerProcess& process) {
  std::function<bool()> hello_waits = [&] { return host.snapshot().phase == protocol::Phase::hello_pending; };
  const bool waits = co_await eventually(hello_waits, 20s);
  REQUIRE(waits);
  CHECK(host.trainer_pid() == process.pid());
  co_await process.stop();
  CHECK(process.state() == TrainerProcess::State::stopped);
  CHECK(process.last_exit() == 128 + SIGTERM);
  CHECK(process.pid() == -1);
  std::function<bool()> left = [&] { return !host.trainer_attached(); };
  const bool gone = co_await eventually(left, 5s);
  CHECK(gone);
}

asio::awaitable<void> engine_give_up(TrainerProcess& process) {
  const TrainerProcess::State state = co_await process.wait_done();
  CHECK(state == TrainerProcess::State::failed);
}

}  // namespace

TEST_CASE("geoloco-train runs rounds 1..3 through the host and exits 0 when told to stop", "[daemon][trainer]") {
  JobDir dir;
  asio::io_context io;
  TrainerHostOptions ho = host_options(dir);
  ho.first_round = 1;
  auto host = TrainerHost::open(io.get_executor(), ho);
  REQUIRE(host.ok());
  auto process = TrainerProcess::start(io.get_executor(), process_options(dir, 5));
  REQUIRE(process.ok());
  test::run_on(io, engine_three_rounds(**host, **process, 5), 60s);
  const std::string log = read_file(dir.log());
  CHECK_THAT(log, Catch::Contains("--- geolocod: started pid") && Catch::Contains("--sync-every 5"));
  CHECK_THAT(log, Catch::Contains("synced with the daemon 3 times"));
}

TEST_CASE("geoloco-train continues from the anchor the host wrote", "[daemon][trainer]") {
  JobDir dir;
  asio::io_context io;
  auto host = TrainerHost::open(io.get_executor(), host_options(dir));
  REQUIRE(host.ok());
  const std::uint64_t h = 5;
  auto process = TrainerProcess::start(io.get_executor(), process_options(dir, h));
  REQUIRE(process.ok());
  std::vector<float> distances;
  test::run_on(io, engine_shifted_anchor(**host, **process, h, distances), 60s);
  REQUIRE(distances.size() == 3);
  // Within 5·H·lr of the anchor it was given (0.025), though that anchor was 0.1 away from its last replica.
  const float bound = static_cast<float>(5 * h * kLr);
  for (float d : distances) {
    CHECK(d > 0);
    CHECK(d <= bound);
  }
}

TEST_CASE("killing geoloco-train mid-phase restarts it and the rounds continue", "[daemon][trainer]") {
  JobDir dir;
  asio::io_context io;
  auto host = TrainerHost::open(io.get_executor(), host_options(dir));
  REQUIRE(host.ok());
  // H = 200: a phase lasts a few tenths of a second, so the kill lands inside it.
  auto process = TrainerProcess::start(io.get_executor(), process_options(dir, 200));
  REQUIRE(process.ok());
  pid_t killed = -1;
  std::vector<std::uint64_t> rounds;
  test::run_on(io, engine_kill_mid_phase(**host, **process, killed, rounds), 90s);
  CHECK(rounds == std::vector<std::uint64_t>{0, 1, 2, 3});
  const std::string log = read_file(dir.log());
  CHECK_THAT(log, Catch::Contains("--- geolocod: started pid " + std::to_string(killed)));
}

TEST_CASE("stop() ends a trainer with SIGTERM and it is not restarted", "[daemon][trainer]") {
  JobDir dir;
  asio::io_context io;
  TrainerHostOptions ho = host_options(dir);
  ho.ask_for_initial = false;  // the trainer waits in HELLO: a live process to stop
  auto host = TrainerHost::open(io.get_executor(), ho);
  REQUIRE(host.ok());
  auto process = TrainerProcess::start(io.get_executor(), process_options(dir, 5));
  REQUIRE(process.ok());
  test::run_on(io, engine_stop_waiting_trainer(**host, **process), 30s);
  CHECK((*process)->restarts() == 0);
}

TEST_CASE("a trainer that keeps failing is given up after max_restarts", "[daemon][trainer]") {
  JobDir dir;
  asio::io_context io;
  TrainerProcessOptions o = process_options(dir, 5);
  o.program = "/bin/false";
  o.max_restarts = 2;
  o.restart_backoff_ms = 10;
  o.max_backoff_ms = 20;
  int give_ups = 0;
  std::string why;
  o.on_give_up = [&](const Status& s) {
    ++give_ups;
    why = s.message();
  };
  auto process = TrainerProcess::start(io.get_executor(), o);
  REQUIRE(process.ok());
  test::run_on(io, engine_give_up(**process), 20s);
  CHECK((*process)->restarts() == 2);
  CHECK((*process)->last_exit() == 1);
  CHECK(give_ups == 1);
  CHECK_THAT(why, Catch::Contains("exited with 1 3 times in a row") && Catch::Contains(dir.log()));
}

TEST_CASE("geoloco-train's arguments and the options' rules", "[daemon][trainer]") {
  TrainerProcessOptions o;
  o.program = "/opt/geoloco/bin/geoloco-train";
  o.socket_path = "/var/lib/geoloco/jobs/j/sync.sock";
  o.job = "j";
  o.log_path = "/var/lib/geoloco/jobs/j/trainer.log";
  o.model = "gpt";
  o.layers = 2;
  o.width = 64;
  o.heads = 4;
  o.context = 32;
  o.steps = 1000;
  o.batch = 8;
  o.lr = 0.0005;
  o.warmup = 0;
  o.seed = 3;
  o.sync_every = 50;
  o.site_shard = 1;
  o.site_shards = 3;
  o.workers = 2;
  o.extra_args = {"--text", "/tmp/kjv.txt"};
  REQUIRE(o.validate().ok());
  const std::vector<std::string> want{"/opt/geoloco/bin/geoloco-train",
                                      "--model",
                                      "gpt",
                                      "--layers",
                                      "2",
                                      "--width",
                                      "64",
                                      "--heads",
                                      "4",
                                      "--context",
                                      "32",
                                      "--steps",
                                      "1000",
                                      "--batch",
                                      "8",
                                      "--lr",
                                      "5e-04",
                                      "--warmup",
                                      "0",
                                      "--seed",
                                      "3",
                                      "--sync-every",
                                      "50",
                                      "--site-shard",
                                      "1",
                                      "--site-shards",
                                      "3",
                                      "--workers",
                                      "2",
                                      "--text",
                                      "/tmp/kjv.txt"};
  CHECK(job::trainer_arguments(o) == want);

  TrainerProcessOptions mlp = o;
  mlp.model = "mlp";
  mlp.hidden = {256, 128};
  mlp.layers = mlp.width = mlp.heads = mlp.context = 0;
  mlp.warmup.reset();
  mlp.workers = 1;
  mlp.extra_args.clear();
  const std::vector<std::string> want_mlp{"/opt/geoloco/bin/geoloco-train",
                                          "--model",
                                          "mlp",
                                          "--hidden",
                                          "256",
                                          "128",
                                          "--steps",
                                          "1000",
                                          "--batch",
                                          "8",
                                          "--lr",
                                          "5e-04",
                                          "--seed",
                                          "3",
                                          "--sync-every",
                                          "50",
                                          "--site-shard",
                                          "1",
                                          "--site-shards",
                                          "3"};
  CHECK(job::trainer_arguments(mlp) == want_mlp);

  // Streaming DiLoCo's τ and α, after the round flags; absent while 0 (above).
  TrainerProcessOptions streaming = mlp;
  streaming.overlap_steps = 5;
  streaming.alpha = 0.25;
  const std::vector<std::string> want_streaming{"/opt/geoloco/bin/geoloco-train",
                                                "--model",
                                                "mlp",
                                                "--hidden",
                                                "256",
                                                "128",
                                                "--steps",
                                                "1000",
                                                "--batch",
                                                "8",
                                                "--lr",
                                                "5e-04",
                                                "--seed",
                                                "3",
                                                "--sync-every",
                                                "50",
                                                "--overlap",
                                                "5",
                                                "--alpha",
                                                "0.25",
                                                "--site-shard",
                                                "1",
                                                "--site-shards",
                                                "3"};
  REQUIRE(streaming.validate().ok());
  CHECK(job::trainer_arguments(streaming) == want_streaming);
  for (double alpha : {-0.5, 1.5, std::nan("")}) {
    streaming.alpha = alpha;
    CHECK_THAT(streaming.validate().message(), Catch::Contains("alpha (streaming's merge weight of the local replica) "
                                                               "must be in [0, 1]"));
  }

  TrainerProcessOptions bad = o;
  bad.sync_every = 0;
  CHECK_THAT(bad.validate().message(), Catch::Contains("sync_every"));
  bad = o;
  bad.site_shard = 3;
  CHECK_THAT(bad.validate().message(), Catch::Contains("site_shard 3 must be below site_shards 3"));
  bad = o;
  bad.model = "cnn";
  CHECK(bad.validate().code() == Err::invalid_argument);
  bad = o;
  bad.log_path.clear();
  CHECK(TrainerProcess::start(asio::io_context().get_executor(), bad).status().code() == Err::invalid_argument);
}
