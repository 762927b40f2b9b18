// The geoloco-train binary, as geolocod starts it, against the protocol's
// fake daemon (inner/protocol/tests/test_daemon.h) on Fashion-MNIST: the
// flags the daemon relies on, end to end.
//   --eval-log       a JSON line per anchor, rounds increasing, one more line than rounds
//   --state-dir      a restarted binary continues bit for bit
//   --sync-seconds   time-based rounds; a slowed trainer (GEOLOCO_TRAIN_STEP_DELAY_MS)
//                    takes fewer steps per round, never fewer than --min-steps;
//                    with 2 workers every SYNC counts whole steps of both
//   --overlap/--alpha Streaming DiLoCo against a daemon numbering rounds as
//                    geolocod does (F = 3): SYNC order, tokens; refusals
//   refusals         exclusive flags, a bad fault-injection value
// Skipped, visibly, without the dataset-fashion-mnist package.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "inner/data/fashion_mnist.h"
#include "inner/tests/temp_files.h"
#include "inner/protocol/tests/test_daemon.h"

extern char** environ;

using namespace geoloco;
namespace pt = geoloco::inner::protocol::testing;
using geoloco::inner::testing::TempDir;

namespace {

const std::string kJob = "train-cli-test";
constexpr std::uint64_t kBatch = 16;

bool have_fashion_mnist() {
  if (std::filesystem::exists(std::string(inner::kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) return true;
  WARN("SKIPPED: " << inner::kFashionMnistDir << " is missing (install dataset-fashion-mnist)");
  return false;
}

struct Proc {
  int code = -1;  // -1: killed at the deadline or by a signal
  std::string output;
};

// Runs geoloco-train with `args` and extra environment entries, stdout and
// stderr into one string; killed after `timeout_s`. The environment is built
// before fork: the fake daemon's thread runs in this process.
Proc run_train(const std::vector<std::string>& args, const std::vector<std::string>& env_extra = {},
               double timeout_s = 60.0) {
  static int n = 0;
  const std::string out_path =
      (std::filesystem::temp_directory_path() /
       ("geoloco-train-cli-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".out"))
          .string();
  std::vector<std::string> argv_s{GEOLOCO_TRAIN_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("GEOLOCO_", 0) == 0) continue;  // nothing of the test's own environment leaks in
    env_s.push_back(kv);
  }
  env_s.insert(env_s.end(), env_extra.begin(), env_extra.end());
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fd);
  Proc p;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      p.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);  // the child this test started
      ::waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream f(out_path);
  std::stringstream ss;
  ss << f.rdbuf();
  p.output = ss.str();
  std::filesystem::remove(out_path);
  return p;
}

std::unique_ptr<inner::protocol::Server> open_server(const std::string& path) {
  inner::protocol::ServerOptions o;
  o.socket_path = path;
  o.job = kJob;
  auto s = inner::protocol::Server::open(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

pt::FakeDaemonConfig daemon_config(std::uint64_t stop_after_round) {
  pt::FakeDaemonConfig c;
  c.eta = 0.5f;
  c.stop_after_round = stop_after_round;
  c.deadline_ms = 120'000;
  return c;
}

// A small mlp on Fashion-MNIST, synced with the fake daemon at `socket` (whose rounds start at 0,
// or at `first_round` in its streaming mode).
std::vector<std::string> base_args(const std::string& socket, const std::string& first_round = "0") {
  return {"--model",      "mlp", "--hidden",      "32",        "--batch",       std::to_string(kBatch),
          "--eval-limit", "300", "--seed",        "3",         "--sync-socket", socket,
          "--job",        kJob,  "--first-round", first_round, "--timeout-ms",  "30000"};
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Steps per SYNC, from its tokens (samples over all workers).
std::vector<std::uint64_t> phase_steps(const pt::FakeDaemon& d, std::uint64_t workers) {
  std::vector<std::uint64_t> steps;
  for (const auto& s : d.syncs()) {
    CHECK(s.sync.tokens % (kBatch * workers) == 0);  // whole steps of every worker
    steps.push_back(s.sync.tokens / (kBatch * workers));
  }
  return steps;
}

}  // namespace

TEST_CASE("geoloco-train --eval-log: a JSON line per anchor, rounds 0..R, finite losses", "[train-cli][eval-log]") {
  if (!have_fashion_mnist()) return;
  auto path = pt::temp_socket_path("cli-log");
  pt::FakeDaemon daemon(open_server(path), daemon_config(2));  // rounds 0, 1, 2; the last RESULT says stop
  TempDir dir("geoloco-train-cli-dir");
  const std::string log = dir.path + "/eval.jsonl";
  const Proc p = run_train(base_args(path) +
                           std::vector<std::string>{"--steps", "100000", "--sync-every", "10", "--eval-log", log});
  INFO(p.output);
  REQUIRE(p.code == 0);
  REQUIRE(daemon.syncs().size() == 3);

  std::ifstream f(log);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 3 + 1);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i].dump());
    CHECK(lines[i]["round"].get<std::uint64_t>() == i);
    const double loss = lines[i]["eval_loss"].get<double>();
    CHECK(std::isfinite(loss));
    CHECK(loss > 0.0);
    const double accuracy = lines[i]["accuracy"].get<double>();
    CHECK((accuracy >= 0.0 && accuracy <= 1.0));
    CHECK(lines[i]["items"].get<std::uint64_t>() == 300);  // --eval-limit
    CHECK(lines[i]["unix_time"].get<double>() > 1.7e9);
  }
  // 30 steps of training: the last anchor is better than the first (the initialization).
  CHECK(lines.back()["eval_loss"].get<double>() < lines.front()["eval_loss"].get<double>() - 0.3);
  CHECK(lines.back()["accuracy"].get<double>() > lines.front()["accuracy"].get<double>() + 0.2);
}

TEST_CASE("geoloco-train --state-dir: a binary restarted between rounds continues bit for bit", "[train-cli][state]") {
  if (!have_fashion_mnist()) return;
  // With 2 workers the restarted group is welcomed with the anchor (no INIT): rank 1 gets it, the
  // resume step and the moments from rank 0.
  for (const std::string workers : {"1", "2"}) {
    INFO("workers " << workers);
    // Warmup 30 > the 20 steps before the restart; the cosine ends at 40 for every run.
    const std::vector<std::string> schedule{"--sync-every",  "10", "--warmup",  "30",
                                            "--decay-steps", "40", "--workers", workers};
    auto path_a = pt::temp_socket_path("cli-a");
    pt::FakeDaemon uninterrupted(open_server(path_a), daemon_config(3));
    const Proc a = run_train(base_args(path_a) + schedule + std::vector<std::string>{"--steps", "40"});
    INFO(a.output);
    REQUIRE(a.code == 0);

    auto path_b = pt::temp_socket_path("cli-b");
    pt::FakeDaemon restarted(open_server(path_b), daemon_config(3));
    TempDir state("geoloco-train-cli-dir");
    const auto with_state = base_args(path_b) + schedule + std::vector<std::string>{"--state-dir", state.path};
    const Proc b1 = run_train(with_state + std::vector<std::string>{"--steps", "20"});  // rounds 0, 1, then it ends
    INFO(b1.output);
    REQUIRE(b1.code == 0);
    CHECK_THAT(b1.output, Catch::Contains("inner state: no saved inner state in " + state.path));
    const Proc b2 = run_train(with_state + std::vector<std::string>{"--steps", "40"});  // welcomed at round 2
    INFO(b2.output);
    REQUIRE(b2.code == 0);
    CHECK_THAT(b2.output, Catch::Contains("inner state: loaded " + state.path + "/inner_state.bin: round 2, step 20"));
    CHECK_THAT(b2.output, Catch::Contains("welcomed at round 2 (first round 0): schedule and data from step 20"));
    CHECK_THAT(b2.output, Catch::Contains("synced with the daemon 2 times"));

    REQUIRE(uninterrupted.syncs().size() == 4);
    REQUIRE(restarted.syncs().size() == 4);
    CHECK(restarted.inits() == 1);  // the second trainer was welcomed with the anchor
    const auto x = uninterrupted.anchor(), y = restarted.anchor();
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("geoloco-train --sync-seconds: a slowed trainer takes fewer steps per round, at least --min-steps",
          "[train-cli][duration][fault]") {
  if (!have_fashion_mnist()) return;
  const std::vector<std::string> timed{"--steps", "100000", "--sync-seconds", "0.3", "--min-steps", "3"};
  auto path_n = pt::temp_socket_path("cli-normal");
  pt::FakeDaemon normal(open_server(path_n), daemon_config(2));
  const Proc n = run_train(base_args(path_n) + timed);
  INFO(n.output);
  REQUIRE(n.code == 0);

  // 200 ms per step: 2 steps would fill the 0.3 s, but every round takes at least 3.
  auto path_s = pt::temp_socket_path("cli-slow");
  pt::FakeDaemon slowed(open_server(path_s), daemon_config(2));
  const Proc s = run_train(base_args(path_s) + timed, {"GEOLOCO_TRAIN_STEP_DELAY_MS=200"});
  INFO(s.output);
  REQUIRE(s.code == 0);
  CHECK_THAT(s.output, Catch::Contains("fault injection: GEOLOCO_TRAIN_STEP_DELAY_MS=200"));
  CHECK_THAT(n.output, !Catch::Contains("fault injection"));

  const auto normal_steps = phase_steps(normal, 1), slowed_steps = phase_steps(slowed, 1);
  INFO("steps per round: normal " << Catch::Detail::stringify(normal_steps) << ", slowed "
                                  << Catch::Detail::stringify(slowed_steps));
  REQUIRE(normal_steps.size() == 3);
  CHECK(slowed_steps == std::vector<std::uint64_t>{3, 3, 3});
  for (std::uint64_t k : normal_steps) CHECK(k > 3);  // a small mlp step takes a few ms, not 100
}

TEST_CASE("geoloco-train --sync-seconds with 2 workers: every SYNC counts whole steps of both",
          "[train-cli][duration]") {
  if (!have_fashion_mnist()) return;
  auto path = pt::temp_socket_path("cli-workers");
  pt::FakeDaemon daemon(open_server(path), daemon_config(2));
  const Proc p = run_train(base_args(path) +
                           std::vector<std::string>{"--steps", "100000", "--sync-seconds", "0.3", "--workers", "2"});
  INFO(p.output);
  REQUIRE(p.code == 0);
  const auto steps = phase_steps(daemon, 2);
  REQUIRE(steps.size() == 3);
  for (std::uint64_t k : steps) CHECK(k >= 1);
}

TEST_CASE("geoloco-train refuses exclusive round flags and a bad step delay", "[train-cli][fault]") {
  // Refused before connecting: no daemon is needed.
  const std::string socket = "/tmp/geoloco-train-cli-nobody.sock";
  const Proc both =
      run_train(base_args(socket) + std::vector<std::string>{"--sync-every", "10", "--sync-seconds", "1"});
  CHECK(both.code == 1);
  CHECK_THAT(both.output, Catch::Contains("--sync-every and --sync-seconds exclude each other"));

  const Proc min_alone =
      run_train(base_args(socket) + std::vector<std::string>{"--sync-every", "10", "--min-steps", "2"});
  CHECK(min_alone.code == 1);
  CHECK_THAT(min_alone.output, Catch::Contains("--min-steps applies only to --sync-seconds rounds"));

  const Proc no_daemon = run_train({"--model", "mlp", "--eval-log", "/tmp/x.jsonl"});
  CHECK(no_daemon.code == 1);
  CHECK_THAT(no_daemon.output, Catch::Contains("--eval-log and --state-dir need --sync-socket"));

  const Proc bad = run_train(base_args(socket) + std::vector<std::string>{"--sync-every", "10"},
                             {"GEOLOCO_TRAIN_STEP_DELAY_MS=20ms"});
  CHECK(bad.code == 1);
  CHECK_THAT(bad.output, Catch::Contains("GEOLOCO_TRAIN_STEP_DELAY_MS='20ms' is not a whole number of milliseconds"));
}

// base_args with geolocod's round numbering (the first round is 1), as the streaming fake daemon counts.
std::vector<std::string> streaming_args(const std::string& socket) { return base_args(socket, "1"); }

TEST_CASE("geoloco-train --overlap --alpha: streaming rounds 1/1, 2/2, 3/0, ... with a daemon of 3 fragments",
          "[train-cli][streaming]") {
  if (!have_fashion_mnist()) return;
  auto path = pt::temp_socket_path("cli-stream");
  pt::FakeDaemonConfig config = daemon_config(6);
  config.fragments = 3;
  config.streaming = true;
  config.first_round = 1;
  pt::FakeDaemon daemon(open_server(path), config);
  const Proc p =
      run_train(streaming_args(path) + std::vector<std::string>{"--steps", "100000", "--sync-every", "6", "--overlap",
                                                                "1", "--alpha", "0.5", "--workers", "2"});
  INFO(p.output);
  REQUIRE(p.code == 0);
  CHECK_THAT(p.output, Catch::Contains("streaming: 3 fragment(s), one per round, overlap 1 step(s), alpha 0.5"));
  CHECK_THAT(p.output, Catch::Contains("round 6 merged at step 13; next sync: round 7; the daemon says stop"));
  const auto syncs = daemon.syncs();
  REQUIRE(syncs.size() == 6);
  for (std::size_t i = 0; i < syncs.size(); ++i) {
    CHECK(syncs[i].sync.round == i + 1);
    CHECK(syncs[i].sync.fragment == (i + 1) % 3);
    CHECK(syncs[i].sync.tokens == 2 * 2 * kBatch);  // 2 steps of 2 workers since the previous SYNC
  }
  CHECK(daemon.refusals().empty());
}

TEST_CASE("geoloco-train refuses --overlap beyond the shortest phase, a bad --alpha, and both without a daemon",
          "[train-cli][streaming]") {
  if (!have_fashion_mnist()) return;
  auto path = pt::temp_socket_path("cli-stream-refuse");
  pt::FakeDaemonConfig config = daemon_config(6);
  config.fragments = 3;
  config.streaming = true;
  pt::FakeDaemon daemon(open_server(path), config);
  const Proc long_overlap =
      run_train(streaming_args(path) + std::vector<std::string>{"--sync-every", "6", "--overlap", "3"});
  CHECK(long_overlap.code == 1);
  CHECK_THAT(long_overlap.output, Catch::Contains("--overlap 3 is longer than the smallest phase (H/F = 6/3 = 2 "
                                                  "steps): one fragment in flight at a time"));
  CHECK(daemon.syncs().empty());

  const std::string socket = "/tmp/geoloco-train-cli-nobody.sock";  // refused before connecting
  const Proc bad_alpha = run_train(base_args(socket) + std::vector<std::string>{"--sync-every", "6", "--alpha", "2"});
  CHECK(bad_alpha.code == 1);
  CHECK_THAT(bad_alpha.output, Catch::Contains("--alpha must be in [0, 1]"));
  const Proc timed = run_train(base_args(socket) + std::vector<std::string>{"--sync-seconds", "1", "--overlap", "1"});
  CHECK(timed.code == 1);
  CHECK_THAT(timed.output, Catch::Contains("--overlap, --alpha and --merge delayed need step-based phases"));
  const Proc no_daemon = run_train({"--model", "mlp", "--overlap", "1"});
  CHECK(no_daemon.code == 1);
  CHECK_THAT(no_daemon.output, Catch::Contains("--overlap needs --sync-socket"));
}
