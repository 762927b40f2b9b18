// Bad input on the daemon side: a wrong layout or job, a round the trainer is
// not in, truncated and malformed messages, another version, a bad magic, an
// oversize body, NaN parameters, messages out of order. Each gets its own
// ERROR text; non-fatal refusals leave snapshot() exactly as it was, fatal
// ones close the connection and leave the job's layout and rounds as they
// were. Single-threaded: a raw trainer writes bytes and pumps the Server.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>

#include "inner/protocol/layout.h"
#include "inner/protocol/tests/mlp_layout.h"
#include "inner/protocol/tests/test_daemon.h"

using namespace geoloco;
using namespace geoloco::inner::protocol;
using namespace geoloco::inner::protocol::testing;

namespace {

std::unique_ptr<Server> open_server(const std::string& path) {
  ServerOptions o;
  o.socket_path = path;
  o.job = "mlp-test";
  o.expected_layout = mlp();
  o.limits.max_body_bytes = 4096;
  auto s = Server::open(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

ErrorMsg as_error(const std::optional<Message>& m) {
  REQUIRE(m.has_value());
  REQUIRE(std::holds_alternative<ErrorMsg>(*m));
  return std::get<ErrorMsg>(*m);
}

// A trainer welcomed with anchor 0..42 and two fragments, both due for round 3.
struct Session {
  std::string path = temp_socket_path("refuse");
  std::unique_ptr<Server> server = open_server(path);
  RawTrainer trainer{path};
  std::vector<float> anchor;

  Session() {
    for (int i = 0; i < 43; ++i) anchor.push_back(static_cast<float>(i));
    trainer.send(HelloMsg{"mlp-test", mlp()});
    pump(*server);
    auto events = server->take_events();
    REQUIRE(events.size() == 1);
    REQUIRE(std::holds_alternative<HelloEvent>(events[0]));
    auto fragments = split_fragments(mlp(), 2, 3);
    REQUIRE(fragments.ok());
    REQUIRE(server->welcome(*fragments, anchor).ok());
    auto w = trainer.read(*server);
    REQUIRE(w.has_value());
    REQUIRE(std::holds_alternative<WelcomeMsg>(*w));
    REQUIRE(trainer.fds.size() == 1);
    REQUIRE(server->snapshot().phase == Phase::training);
  }
  std::vector<std::byte> sync_bytes(std::uint64_t round, std::uint32_t fragment) {
    auto b = encode(SyncMsg{round, fragment, 64, 0.5});
    REQUIRE(b.ok());
    return *b;
  }
  // The refusal the server reported (as the daemon would log it).
  RefusalEvent refusal() {
    auto events = server->take_events();
    REQUIRE(events.size() >= 1);
    REQUIRE(std::holds_alternative<RefusalEvent>(events[0]));
    return std::get<RefusalEvent>(events[0]);
  }
  // A valid SYNC after a refusal is accepted: the session survived.
  void still_works(std::uint32_t fragment = 0) {
    (void)server->take_events();  // the refusals already checked
    trainer.send(sync_bytes(3, fragment));
    pump(*server);
    auto events = server->take_events();
    REQUIRE(events.size() == 1);
    REQUIRE(std::holds_alternative<SyncEvent>(events[0]));
    CHECK(std::get<SyncEvent>(events[0]).sync.round == 3);
  }
};

}  // namespace

TEST_CASE("a layout that does not match the job is refused and the job keeps its layout") {
  auto path = temp_socket_path("layout");
  auto server = open_server(path);
  auto before = server->snapshot();
  RawTrainer trainer(path);
  Layout swapped = mlp();
  swapped[2].shape = {4, 3};
  trainer.send(HelloMsg{"mlp-test", swapped});
  const auto& e = as_error(trainer.read(*server));
  CHECK(e.code == Err::mismatch);
  CHECK(e.fatal);
  CHECK(e.refused == static_cast<std::uint8_t>(MessageType::hello));
  CHECK(e.reason ==
        "the trainer's layout does not match job 'mlp-test': tensor 2 ('fc2.weight'): the job expects shape [3, 4], "
        "the trainer sent [4, 3]");
  CHECK_FALSE(trainer.read(*server).has_value());  // closed after the ERROR
  CHECK(server->snapshot() == before);
  CHECK(trainer.fds.empty());  // no segment was handed out

  RawTrainer other_job(path);
  other_job.send(HelloMsg{"mnist", mlp()});
  const auto& j = as_error(other_job.read(*server));
  CHECK(j.reason == "this socket serves job 'mlp-test', the trainer asked for 'mnist'");
  CHECK(server->snapshot() == before);

  RawTrainer gaps(path);
  Layout gap = mlp();
  gap[1].offset = 25;
  gaps.send(HelloMsg{"mlp-test", gap});
  const auto& g = as_error(gaps.read(*server));
  CHECK(g.code == Err::invalid_argument);
  CHECK_THAT(g.reason, Catch::Contains("the trainer's layout is invalid: tensor 'fc1.bias' is at offset 25"));
  CHECK(server->snapshot() == before);
}

TEST_CASE("a SYNC for a round the trainer is not in is refused and changes nothing") {
  Session s;
  auto before = s.server->snapshot();
  s.trainer.send(s.sync_bytes(7, 0));
  const auto& e = as_error(s.trainer.read(*s.server));
  CHECK(e.code == Err::mismatch);
  CHECK_FALSE(e.fatal);
  CHECK(e.refused == static_cast<std::uint8_t>(MessageType::sync));
  CHECK(e.round == 7);
  CHECK(e.fragment == 0);
  CHECK(e.reason == "SYNC is for round 7 but fragment 0 is due for round 3; the trainer is not in round 7");
  CHECK(s.refusal().status.message() == e.reason);
  CHECK(s.server->snapshot() == before);
  s.still_works();

  // The same fragment again while its round is in flight.
  auto in_flight = s.server->snapshot();
  s.trainer.send(s.sync_bytes(3, 0));
  const auto& twice = as_error(s.trainer.read(*s.server));
  CHECK_THAT(twice.reason, Catch::Contains("fragment 0 of round 3 is already being synchronized"));
  CHECK(s.server->snapshot() == in_flight);

  // An unknown fragment.
  s.trainer.send(s.sync_bytes(3, 9));
  CHECK(as_error(s.trainer.read(*s.server)).reason == "SYNC names fragment 9 but the job has 2 fragment(s)");
  CHECK(s.server->snapshot() == in_flight);
}

TEST_CASE("a truncated message is refused and the session continues") {
  Session s;
  auto before = s.server->snapshot();
  // A complete frame whose body is too short for a SYNC.
  auto bytes = s.sync_bytes(3, 0);
  std::uint32_t short_body = 8;
  std::memcpy(bytes.data() + 8, &short_body, 4);
  bytes.resize(kHeaderSize + 8);
  s.trainer.send(bytes);
  const auto& e = as_error(s.trainer.read(*s.server));
  CHECK(e.code == Err::truncated);
  CHECK_FALSE(e.fatal);
  CHECK(e.reason == "SYNC: SYNC body is shorter than its 32 bytes");
  CHECK(s.server->snapshot() == before);
  s.still_works();
}

TEST_CASE("a connection that ends inside a message is reported as truncated; the rounds stay") {
  Session s;
  auto before = s.server->snapshot();
  auto bytes = s.sync_bytes(3, 1);
  bytes.resize(20);
  s.trainer.send(bytes);
  s.trainer.close();
  pump(*s.server);
  auto events = s.server->take_events();
  REQUIRE(events.size() >= 1);
  REQUIRE(std::holds_alternative<TrainerLeftEvent>(events[0]));
  const auto& left = std::get<TrainerLeftEvent>(events[0]).reason;
  CHECK(left.code() == Err::truncated);
  CHECK(left.message() == "the trainer closed the connection in the middle of a message (20 bytes of it arrived)");
  CHECK(s.server->snapshot().fragments == before.fragments);
  CHECK(s.server->snapshot().layout == before.layout);
}

TEST_CASE("another protocol version is refused with both versions named") {
  Session s;
  auto before = s.server->snapshot();
  auto bytes = s.sync_bytes(3, 0);
  bytes[4] = std::byte{2};
  s.trainer.send(bytes);
  const auto& e = as_error(s.trainer.read(*s.server));
  CHECK(e.code == Err::unsupported);
  CHECK(e.fatal);
  CHECK(e.reason == "protocol version 2 is not supported; this side speaks version 1");
  CHECK_FALSE(s.trainer.read(*s.server).has_value());
  CHECK(s.server->snapshot().fragments == before.fragments);
  CHECK(s.server->snapshot().layout == before.layout);
  CHECK(s.server->snapshot().phase == Phase::no_trainer);

  // A HELLO of another version on a fresh connection: same answer, no segment.
  RawTrainer next(s.path);
  auto hello = encode(HelloMsg{"mlp-test", mlp()});
  REQUIRE(hello.ok());
  (*hello)[4] = std::byte{7};
  next.send(*hello);
  CHECK(as_error(next.read(*s.server)).reason == "protocol version 7 is not supported; this side speaks version 1");
  CHECK(next.fds.empty());
}

TEST_CASE("bad magic and oversize bodies close the connection with their reason") {
  Session s;
  auto before = s.server->snapshot();
  s.trainer.send(std::as_bytes(std::span("GET / HTTP/1.1\r\n", 16)));
  const auto& e = as_error(s.trainer.read(*s.server));
  CHECK(e.code == Err::malformed);
  CHECK_THAT(e.reason, Catch::StartsWith("bad message magic"));
  CHECK(s.server->snapshot().fragments == before.fragments);

  RawTrainer big(s.path);
  auto bytes = encode(HelloMsg{"mlp-test", mlp()});
  REQUIRE(bytes.ok());
  std::uint32_t huge = 1u << 30;
  std::memcpy(bytes->data() + 8, &huge, 4);
  big.send(*bytes);
  const auto& b = as_error(big.read(*s.server));
  CHECK(b.code == Err::too_large);
  CHECK(b.reason == "HELLO body of 1073741824 bytes is over the limit of 4096");
}

TEST_CASE("a replica with NaN is refused naming the tensor, and the anchor is not touched") {
  Session s;
  auto before = s.server->snapshot();
  auto shared = s.server->segment_values();
  shared[30] = std::numeric_limits<float>::quiet_NaN();  // fc2.weight[2], in fragment 1
  s.trainer.send(s.sync_bytes(3, 1));
  const auto& e = as_error(s.trainer.read(*s.server));
  CHECK(e.code == Err::non_finite);
  CHECK_FALSE(e.fatal);
  CHECK_THAT(e.reason, Catch::Contains("tensor 'fc2.weight' has a NaN value at index 2"));
  CHECK(s.server->snapshot() == before);
  shared[30] = 30.0f;
  s.still_works(1);
}

TEST_CASE("messages out of order are refused without changing the phase") {
  auto path = temp_socket_path("order");
  auto server = open_server(path);
  RawTrainer t(path);
  t.send(HelloMsg{"mlp-test", mlp()});
  pump(*server);
  REQUIRE(server->take_events().size() == 1);
  auto pending = server->snapshot();
  REQUIRE(pending.phase == Phase::hello_pending);

  t.send(SyncMsg{0, 0, 1, 1.0});
  CHECK(as_error(t.read(*server)).reason == "SYNC before the trainer was welcomed with an anchor (now: HELLO pending)");
  t.send(InitMsg{});
  CHECK_THAT(as_error(t.read(*server)).reason, Catch::Contains("INIT is only valid after a WELCOME that asked"));
  t.send(HelloMsg{"mlp-test", mlp()});
  CHECK(as_error(t.read(*server)).reason == "HELLO was already received on this connection (HELLO pending)");
  t.send(ResultMsg{0, 0, 0, 1});
  CHECK_THAT(as_error(t.read(*server)).reason, Catch::Contains("RESULT is a daemon's message"));
  CHECK(server->snapshot() == pending);

  // The daemon's own calls are checked too, and a misuse changes nothing.
  CHECK_THAT(server->publish_initial(std::vector<float>(43)).message(), Catch::Contains("no INIT is waiting"));
  CHECK_THAT(server->complete_sync(0, std::vector<float>(43), 1, false).message(),
             Catch::Contains("fragment 0 does not exist (the job has 0)"));
  std::vector<FragmentDesc> cut = {{0, 20, 0}, {20, 23, 0}};
  CHECK_THAT(server->welcome(cut, std::vector<float>(43)).message(), Catch::Contains("inside a tensor"));
  auto whole = split_fragments(mlp(), 1, 0);
  CHECK_THAT(server->welcome(*whole, std::vector<float>(42)).message(), Catch::Contains("the anchor has 42 values"));
  CHECK(server->snapshot() == pending);

  // Welcomed for the initial parameters: INIT is now right, SYNC still is not.
  REQUIRE(server->welcome_for_initial(*whole).ok());
  auto w = t.read(*server);
  REQUIRE(std::holds_alternative<WelcomeMsg>(*w));
  CHECK_FALSE(std::get<WelcomeMsg>(*w).anchor_ready());
  t.send(SyncMsg{0, 0, 1, 1.0});
  CHECK_THAT(as_error(t.read(*server)).reason, Catch::Contains("(now: awaiting INIT)"));
  (void)server->take_events();
  t.send(InitMsg{});
  pump(*server);
  auto events = server->take_events();
  REQUIRE(events.size() == 1);
  CHECK(std::holds_alternative<InitEvent>(events[0]));
  CHECK(server->snapshot().phase == Phase::init_pending);
}

TEST_CASE("a RESULT completed after its trainer left goes to no one; the next trainer gets its WELCOME") {
  Session s;
  // Both fragments in flight, then the trainer dies before its RESULTs.
  s.trainer.send(s.sync_bytes(3, 0));
  s.trainer.send(s.sync_bytes(3, 1));
  pump(*s.server);
  (void)s.server->take_events();
  s.trainer.close();
  pump(*s.server);
  // A restarted trainer says HELLO while the daemon is still exchanging.
  RawTrainer next(s.path);
  next.send(HelloMsg{"mlp-test", mlp()});
  pump(*s.server);
  // The exchange ends: the round advances, but no RESULT may reach the newcomer.
  auto table = split_fragments(mlp(), 2, 3);
  REQUIRE(table.ok());
  for (std::uint32_t f = 0; f < 2; ++f) {
    const auto& d = (*table)[f];
    REQUIRE(s.server->complete_sync(f, std::span<const float>(s.anchor).subspan(d.offset, d.length), 4, false).ok());
  }
  auto fragments = split_fragments(mlp(), 2, 4);
  REQUIRE(fragments.ok());
  REQUIRE(s.server->welcome(*fragments, s.anchor).ok());
  auto first = next.read(*s.server);
  REQUIRE(first.has_value());
  CHECK(std::holds_alternative<WelcomeMsg>(*first));  // before the fix: a stray RESULT came first
}

TEST_CASE("a trainer that vanishes with messages queued for it does not take the daemon down") {
  Session s;
  s.trainer.send(s.sync_bytes(3, 0));
  pump(*s.server);
  (void)s.server->take_events();
  s.trainer.close();  // gone before its RESULT
  // Sending to a closed peer fails (EPIPE); the server closes the trainer
  // once instead of retrying the queue until the stack overflows.
  auto table = split_fragments(mlp(), 2, 3);
  REQUIRE(table.ok());
  const auto& d = (*table)[0];
  REQUIRE(s.server->complete_sync(0, std::span<const float>(s.anchor).subspan(d.offset, d.length), 4, false).ok());
  pump(*s.server);
  bool left = false;
  for (auto& e : s.server->take_events()) left |= std::holds_alternative<TrainerLeftEvent>(e);
  CHECK(left);
  CHECK(s.server->snapshot().phase == Phase::no_trainer);
}
