// The trainer side (Client) against a fake daemon loop driving the daemon
// side (Server) on another thread: initial parameters, streamed rounds of two
// fragments with a closed-form outer step, restarts, and a vanished daemon.
// Every value that crosses shared memory is compared exactly: the fake
// daemon computes anchor − 0.5·(anchor − replica) in fp32, as this side does.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "inner/protocol/client.h"
#include "inner/protocol/layout.h"
#include "inner/protocol/tests/mlp_layout.h"
#include "inner/protocol/tests/test_daemon.h"

using namespace geoloco;
using namespace geoloco::inner::protocol;
using namespace geoloco::inner::protocol::testing;

namespace {

std::unique_ptr<Server> open_server(const std::string& path, Layout expected = {}) {
  ServerOptions o;
  o.socket_path = path;
  o.job = "mlp-test";
  o.expected_layout = std::move(expected);
  auto s = Server::open(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

// Waits (bounded) until `cond` holds; the fake daemon runs on its own thread.
template <class F>
bool eventually(F cond, int timeout_ms = 5000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

float outer_step(float anchor, float replica) { return anchor - 0.5f * (anchor - replica); }

}  // namespace

TEST_CASE("a trainer hands over its initial parameters and syncs three streamed rounds of two fragments") {
  auto path = temp_socket_path("session");
  FakeDaemonConfig cfg;
  cfg.fragments = 2;
  cfg.init_shift = 1.0f;
  cfg.stop_after_round = 2;
  FakeDaemon daemon(open_server(path), cfg);

  auto client = Client::connect(path, "mlp-test", mlp());
  REQUIRE(client.ok());
  auto& c = **client;
  CHECK_FALSE(c.anchor_ready());
  REQUIRE(c.fragments() == std::vector<FragmentDesc>{{0, 24, 0}, {24, 19, 0}});
  REQUIRE(c.parameters().size() == 43);

  for (std::size_t i = 0; i < 43; ++i) c.parameters()[i] = 0.25f * static_cast<float>(i);
  REQUIRE(c.send_initial(5000).ok());
  CHECK(c.anchor_ready());
  // The daemon answered INIT with the parameters plus 1: proof the anchor came from its side.
  std::vector<float> anchor(43);
  for (std::size_t i = 0; i < 43; ++i) {
    anchor[i] = 0.25f * static_cast<float>(i) + 1.0f;
    REQUIRE(c.parameters()[i] == anchor[i]);
  }
  CHECK(c.next_round(0) == 0);
  CHECK(c.next_round(1) == 0);

  for (std::uint64_t r = 0; r < 3; ++r) {
    // Both fragments go out before either answer is awaited, as the
    // streaming trainer overlaps exchanges with training.
    for (std::uint32_t f = 0; f < 2; ++f) {
      auto v = c.fragment_values(f);
      const auto& d = c.fragments()[f];
      for (std::size_t k = 0; k < v.size(); ++k) v[k] = anchor[d.offset + k] + static_cast<float>(r + 1 + f);
      REQUIRE(c.sync(c.next_round(f), f, 100 * (r + 1), 2.0 / static_cast<double>(r + 1)).ok());
    }
    for (std::uint32_t f = 0; f < 2; ++f) {
      auto res = c.wait_result(5000);
      REQUIRE(res.ok());
      CHECK(res->round == r);
      CHECK(res->fragment == f);  // one connection keeps the order
      CHECK(res->next_round == r + 1);
      CHECK(res->stop() == (r == 2));
      const auto& d = c.fragments()[f];
      for (std::size_t k = 0; k < d.length; ++k) {
        float& a = anchor[d.offset + k];
        a = outer_step(a, a + static_cast<float>(r + 1 + f));
        REQUIRE(c.parameters()[d.offset + k] == a);
      }
    }
    CHECK(c.next_round(0) == r + 1);
  }
  CHECK(c.stopped());

  auto syncs = daemon.syncs();
  REQUIRE(syncs.size() == 6);
  for (std::size_t i = 0; i < syncs.size(); ++i) {
    CHECK(syncs[i].sync.round == i / 2);
    CHECK(syncs[i].sync.fragment == i % 2);
    CHECK(syncs[i].sync.tokens == 100 * (i / 2 + 1));
    CHECK(syncs[i].sync.loss == 2.0 / static_cast<double>(i / 2 + 1));
  }
  CHECK(syncs[5].replica.size() == 19);
  CHECK(daemon.anchor() == anchor);
  CHECK(daemon.inits() == 1);
  CHECK(daemon.failures().empty());
  CHECK(daemon.refusals().empty());
}

TEST_CASE("a restarted trainer is welcomed with the daemon's anchor at the daemon's rounds") {
  auto path = temp_socket_path("restart");
  FakeDaemonConfig cfg;
  for (int i = 0; i < 43; ++i) cfg.anchor.push_back(static_cast<float>(i) - 20.0f);
  FakeDaemon daemon(open_server(path, mlp()), cfg);

  {
    auto a = Client::connect(path, "mlp-test", mlp());
    REQUIRE(a.ok());
    REQUIRE((*a)->anchor_ready());
    for (int i = 0; i < 43; ++i) REQUIRE((*a)->parameters()[i] == cfg.anchor[i]);
    for (auto& v : (*a)->parameters()) v += 2.0f;
    REQUIRE((*a)->sync(0, 0, 10, 1.5).ok());
    auto res = (*a)->wait_result(5000);
    REQUIRE(res.ok());
    CHECK(res->next_round == 1);
    CHECK_FALSE(res->stop());
    for (int i = 0; i < 43; ++i) REQUIRE((*a)->parameters()[i] == cfg.anchor[i] + 1.0f);  // half way to the replica
  }
  REQUIRE(eventually([&] { return daemon.departures().size() == 1; }));
  CHECK_THAT(daemon.departures()[0].message(), Catch::Contains("closed the connection"));

  {
    // This trainer sends a SYNC and dies before its RESULT: the daemon still
    // completes the round, and the next trainer starts after it.
    auto b = Client::connect(path, "mlp-test", mlp());
    REQUIRE(b.ok());
    CHECK((*b)->next_round(0) == 1);
    for (int i = 0; i < 43; ++i) REQUIRE((*b)->parameters()[i] == cfg.anchor[i] + 1.0f);
    for (auto& v : (*b)->parameters()) v -= 4.0f;
    REQUIRE((*b)->sync(1, 0, 10, 1.0).ok());
  }
  REQUIRE(eventually([&] { return daemon.departures().size() == 2 && daemon.syncs().size() == 2; }));
  REQUIRE(eventually([&] { return !daemon.snapshot().fragments.at(0).in_flight; }));

  auto c = Client::connect(path, "mlp-test", mlp());
  REQUIRE(c.ok());
  CHECK((*c)->next_round(0) == 2);
  for (int i = 0; i < 43; ++i) REQUIRE((*c)->parameters()[i] == cfg.anchor[i] - 1.0f);  // (a+1) − 0.5·4
  CHECK(daemon.hellos() == 3);
  CHECK(daemon.inits() == 0);
  CHECK(daemon.failures().empty());
}

TEST_CASE("a second trainer is refused while one is attached") {
  auto path = temp_socket_path("second");
  FakeDaemonConfig cfg;
  cfg.anchor.assign(43, 1.0f);
  FakeDaemon daemon(open_server(path), cfg);
  // The daemon's group may attach a trainer (a trainer running as another user), others may not.
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);
  auto first = Client::connect(path, "mlp-test", mlp());
  REQUIRE(first.ok());
  auto second = Client::connect(path, "mlp-test", mlp());
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == Err::invalid_argument);
  CHECK_THAT(second.status().message(), Catch::Contains("job 'mlp-test' already has a trainer attached"));
  CHECK_THAT(second.status().message(), Catch::Contains("[connection closed]"));
  // The first one is unaffected.
  REQUIRE((*first)->sync(0, 0, 1, 1.0).ok());
  auto res = (*first)->wait_result(5000);
  REQUIRE(res.ok());
  CHECK(res->round == 0);
  CHECK(daemon.refusals().size() == 1);
}

TEST_CASE("the client reports a silent daemon, a vanished daemon and a refused HELLO") {
  auto path = temp_socket_path("gone");
  FakeDaemonConfig cfg;
  cfg.anchor.assign(43, 1.0f);
  auto daemon = std::make_unique<FakeDaemon>(open_server(path, mlp()), cfg);
  auto c = Client::connect(path, "mlp-test", mlp());
  REQUIRE(c.ok());
  auto quiet = (*c)->wait_result(50);
  CHECK(quiet.status().code() == Err::timeout);
  CHECK_THAT(quiet.status().message(), Catch::Contains("no answer from the daemon within 50 ms"));

  Layout other = mlp();
  other[3].shape = {5};
  // A second connection is refused for being second; test the layout refusal
  // after the first trainer leaves.
  c->reset();
  REQUIRE(eventually([&] { return daemon->departures().size() == 1; }));
  auto wrong = Client::connect(path, "mlp-test", other);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == Err::mismatch);
  CHECK_THAT(wrong.status().message(),
             Catch::Contains("daemon refused HELLO: the trainer's layout does not match job 'mlp-test': tensor 3 "
                             "('fc2.bias'): the job expects shape [3], the trainer sent [5]"));

  auto again = Client::connect(path, "mlp-test", mlp());
  REQUIRE(again.ok());
  daemon.reset();  // the daemon stops and closes every socket
  // Unix sockets fail a send to a closed peer at once; otherwise the wait says it.
  Status sent = (*again)->sync(0, 0, 1, 1.0);
  Status gone = sent.ok() ? (*again)->wait_result(5000).status() : sent;
  CHECK(gone.code() == Err::io);
  CHECK_THAT(gone.message(), Catch::Contains(sent.ok() ? "the daemon closed the connection" : "Broken pipe"));

  auto nobody = Client::connect(path, "mlp-test", mlp(), ClientOptions{100, 100, {}});
  CHECK(nobody.status().code() == Err::timeout);
  CHECK_THAT(nobody.status().message(), Catch::Contains("no daemon answered"));
}
