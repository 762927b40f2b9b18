// A one-site "daemon" for the Python integration tests: hosts the daemon-side
// Server, starts the trainer command, and answers it like a daemon would:
// HELLO -> WELCOME (asking for the initial parameters the first time, with
// its anchor afterwards), INIT -> the trainer's own parameters become the
// anchor, SYNC(r, f) -> anchor ← anchor − eta·(anchor − replica) in fp32,
// RESULT(r, f, next r+1, stop after the last round). At the end it checks
// what it saw (rounds in order per fragment, finite losses, the expected
// numbers of syncs and refusals, optionally a falling loss) and the trainer's
// exit status. Exits 77 when the trainer did (a missing Python package).
//
// usage: inner_protocol_sync_host --rounds R [--fragments F] [--eta E]
//          [--expect-syncs N] [--expect-refusals N] [--expect-loss-drop]
//          [--timeout-s S] SOCKET|auto -- COMMAND ARGS...
// The trainer command gets the socket path and job name in GEOLOCO_SOCKET
// and GEOLOCO_JOB.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "inner/protocol/layout.h"
#include "inner/protocol/server.h"

using namespace geoloco;
using namespace geoloco::inner::protocol;

namespace {

struct Options {
  std::uint64_t rounds = 3;
  std::uint32_t fragments = 1;
  float eta = 0.5f;
  long expect_syncs = -1;  // default rounds × fragments
  long expect_refusals = 0;
  bool expect_loss_drop = false;
  int timeout_s = 25;
  std::string socket;
  std::vector<char*> command;
};

int usage(const char* why) {
  std::fprintf(stderr, "inner_protocol_sync_host: %s\n", why);
  return 2;
}

struct Host {
  Options opt;
  std::unique_ptr<Server> server;
  std::vector<float> anchor;
  std::map<std::uint32_t, std::vector<std::uint64_t>> rounds;  // per fragment, in arrival order
  std::map<std::uint64_t, std::vector<double>> losses;         // per round
  long syncs = 0, refusals = 0, hellos = 0;
  std::vector<std::string> problems;

  void handle(Event& event) {
    if (auto* h = std::get_if<HelloEvent>(&event)) {
      ++hellos;
      auto fragments = split_fragments(h->layout, opt.fragments, 0);
      if (!fragments.ok()) return server->drop_trainer(Err::invalid_argument, fragments.status().message());
      // A returning trainer continues at the daemon's rounds.
      auto snap = server->snapshot();
      for (std::size_t f = 0; f < snap.fragments.size() && f < fragments->size(); ++f)
        (*fragments)[f].next_round = snap.fragments[f].desc.next_round;
      Status s = anchor.empty() ? server->welcome_for_initial(*fragments) : server->welcome(*fragments, anchor);
      if (!s.ok()) problems.push_back("welcome: " + s.message());
      std::printf("host: HELLO from pid %d, %zu tensors, %s\n", static_cast<int>(h->pid), h->layout.size(),
                  anchor.empty() ? "asking for the initial parameters" : "sending the anchor");
    } else if (auto* i = std::get_if<InitEvent>(&event)) {
      anchor.assign(i->parameters.begin(), i->parameters.end());
      if (Status s = server->publish_initial(anchor); !s.ok()) problems.push_back("publish_initial: " + s.message());
      std::printf("host: INIT, %zu values adopted as the anchor\n", anchor.size());
    } else if (auto* y = std::get_if<SyncEvent>(&event)) {
      const SyncMsg& m = y->sync;
      ++syncs;
      rounds[m.fragment].push_back(m.round);
      losses[m.round].push_back(m.loss);
      const FragmentDesc d = server->snapshot().fragments.at(m.fragment).desc;
      for (std::size_t k = 0; k < d.length; ++k) {
        float& a = anchor[d.offset + k];
        a = a - opt.eta * (a - y->replica[k]);
      }
      bool stop = m.round + 1 >= opt.rounds;
      Status s = server->complete_sync(m.fragment, std::span(anchor).subspan(d.offset, d.length), m.round + 1, stop);
      if (!s.ok()) problems.push_back("complete_sync: " + s.message());
      std::printf("host: SYNC round %llu fragment %u tokens %llu loss %.4f%s\n",
                  static_cast<unsigned long long>(m.round), m.fragment, static_cast<unsigned long long>(m.tokens),
                  m.loss, stop ? " (stop)" : "");
    } else if (auto* r = std::get_if<RefusalEvent>(&event)) {
      ++refusals;
      std::printf("host: refused: %s\n", r->status.message().c_str());
    } else if (auto* l = std::get_if<TrainerLeftEvent>(&event)) {
      std::printf("host: trainer left: %s\n", l->reason.message().c_str());
    }
    std::fflush(stdout);
  }

  void check() {
    long want_syncs = opt.expect_syncs >= 0 ? opt.expect_syncs : static_cast<long>(opt.rounds * opt.fragments);
    if (syncs != want_syncs)
      problems.push_back("saw " + std::to_string(syncs) + " SYNCs, expected " + std::to_string(want_syncs));
    if (refusals != opt.expect_refusals)
      problems.push_back("saw " + std::to_string(refusals) + " refusals, expected " +
                         std::to_string(opt.expect_refusals));
    for (const auto& [f, rs] : rounds)
      for (std::size_t i = 0; i < rs.size(); ++i)
        if (rs[i] != i)
          problems.push_back("fragment " + std::to_string(f) + " synced round " + std::to_string(rs[i]) + " in place " +
                             std::to_string(i));
    for (const auto& [r, ls] : losses)
      for (double l : ls)
        if (!std::isfinite(l)) problems.push_back("round " + std::to_string(r) + " reported a non-finite loss");
    if (opt.expect_loss_drop && losses.size() >= 2) {
      double first = losses.begin()->second.front(), last = losses.rbegin()->second.front();
      if (!(last < first))
        problems.push_back("loss did not fall: " + std::to_string(first) + " -> " + std::to_string(last));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--rounds") opt.rounds = std::strtoull(value(), nullptr, 10);
    else if (a == "--fragments") opt.fragments = static_cast<std::uint32_t>(std::strtoul(value(), nullptr, 10));
    else if (a == "--eta") opt.eta = std::strtof(value(), nullptr);
    else if (a == "--expect-syncs") opt.expect_syncs = std::strtol(value(), nullptr, 10);
    else if (a == "--expect-refusals") opt.expect_refusals = std::strtol(value(), nullptr, 10);
    else if (a == "--expect-loss-drop") opt.expect_loss_drop = true;
    else if (a == "--timeout-s") opt.timeout_s = std::atoi(value());
    else if (opt.socket.empty() && a[0] != '-') opt.socket = a;
    else return usage(("unknown argument " + a).c_str());
  }
  for (; i < argc; ++i) opt.command.push_back(argv[i]);
  if (opt.socket.empty() || opt.command.empty()) return usage("need SOCKET -- COMMAND");
  // "auto": a path of this process's own, so parallel test runs never share a socket.
  if (opt.socket == "auto") opt.socket = "/tmp/geoloco-host-" + std::to_string(::getpid()) + ".sock";
  opt.command.push_back(nullptr);

  Host host{opt, nullptr, {}, {}, {}, 0, 0, 0, {}};
  ServerOptions so;
  so.socket_path = opt.socket;
  so.job = "python-test";
  auto server = Server::open(so);
  if (!server.ok()) return usage(server.status().to_string().c_str());
  host.server = std::move(*server);

  ::setenv("GEOLOCO_SOCKET", opt.socket.c_str(), 1);
  ::setenv("GEOLOCO_JOB", so.job.c_str(), 1);
  pid_t child = ::fork();
  if (child < 0) return usage("fork failed");
  if (child == 0) {
    ::execvp(opt.command[0], opt.command.data());
    std::perror("exec");
    ::_exit(127);
  }

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
  int status = 0;
  bool exited = false;
  while (!exited) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);  // the child this program started, by pid
      ::waitpid(child, &status, 0);
      std::fprintf(stderr, "FAILED: the trainer did not finish within %d s\n", opt.timeout_s);
      return 1;
    }
    pollfd fds[2] = {{host.server->listen_fd(), POLLIN, 0}, {host.server->trainer_fd(), POLLIN, 0}};
    if (host.server->wants_write()) fds[1].events |= POLLOUT;
    if (::poll(fds, host.server->trainer_fd() >= 0 ? 2 : 1, 20) > 0) {
      if (fds[0].revents & POLLIN) host.server->on_listen_readable();
      if (host.server->trainer_fd() >= 0 && (fds[1].revents & POLLOUT)) host.server->on_trainer_writable();
      if (host.server->trainer_fd() >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
        host.server->on_trainer_readable();
    }
    for (auto& e : host.server->take_events()) host.handle(e);
    exited = ::waitpid(child, &status, WNOHANG) == child;
  }
  // What the trainer sent just before exiting.
  host.server->on_trainer_readable();
  for (auto& e : host.server->take_events()) host.handle(e);

  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 77) {
    std::printf("host: the trainer skipped (exit 77)\n");
    return 77;
  }
  if (code != 0) host.problems.push_back("the trainer exited with " + std::to_string(code));
  host.check();
  for (const auto& p : host.problems) std::fprintf(stderr, "FAILED: %s\n", p.c_str());
  if (!host.problems.empty()) return 1;
  std::printf("ok: %ld SYNCs over %llu rounds, %ld refusals, %ld HELLOs\n", host.syncs,
              static_cast<unsigned long long>(opt.rounds), host.refusals, host.hellos);
  return 0;
}
