// Certificates rotate under a live mesh (Mesh::reload_tls): every live
// connection is replaced while control frames and all-reduces keep flowing,
// and none is lost or reordered; a CRL loaded by a reload closes a revoked
// peer's connections and refuses it, by name, from then on; a reload with
// files that cannot be used changes nothing.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "transport/allreduce.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::transport;
using namespace std::chrono_literals;

namespace {

struct Federated {
  std::unique_ptr<loopback::Federation> federation;
  std::vector<std::unique_ptr<loopback::Site>> sites;
};

Federated federate(const std::vector<std::string>& names) {
  auto federation = loopback::Federation::create(names);
  REQUIRE(federation.ok());
  auto sites = loopback::make_sites(**federation, names, loopback::test_options());
  REQUIRE(sites.ok());
  return {std::move(*federation), std::move(*sites)};
}

Status reload(loopback::Site& site, const tls::TlsFiles& files) {
  return site.call([&] { return site.mesh().reload_tls(files); });
}

// An equal-weight all-reduce of all `sites`; site s contributes s+1 + i/1024 at i.
std::vector<std::future<Result<AllReduceStats>>> spawn_round(std::vector<loopback::Site*> sites, std::uint64_t round,
                                                             std::vector<std::vector<float>>& in,
                                                             std::vector<std::vector<float>>& out) {
  std::vector<std::string> names;
  for (auto* s : sites) names.push_back(s->name());
  std::vector<std::future<Result<AllReduceStats>>> futures;
  for (std::size_t s = 0; s < sites.size(); ++s) {
    AllReduceRequest q;
    q.key = {round, 0};
    q.participants = names;
    q.weights.assign(sites.size(), 1.0);
    q.input = in[s];
    q.output = out[s];
    q.timeout = 20s;
    Mesh& mesh = sites[s]->mesh();
    futures.push_back(sites[s]->spawn([&mesh, q]() { return all_reduce(mesh, q); }));
  }
  return futures;
}

// Runs `rounds` all-reduces between `sites` and checks each average exactly.
void all_reduces(std::vector<loopback::Site*> sites, std::uint64_t first_round, int rounds, std::size_t values) {
  const std::size_t n = sites.size();
  std::vector<std::vector<float>> in(n, std::vector<float>(values)), out(n, std::vector<float>(values));
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t i = 0; i < values; ++i) in[s][i] = static_cast<float>(s + 1) + static_cast<float>(i % 1024) / 1024;
  for (int r = 0; r < rounds; ++r) {
    const std::uint64_t round = first_round + static_cast<std::uint64_t>(r);
    auto futures = spawn_round(sites, round, in, out);
    auto results = loopback::wait_all(futures);
    for (std::size_t s = 0; s < n; ++s)
      UNSCOPED_INFO("round " << round << " site " << sites[s]->name() << ": " << results[s].status().message());
    for (std::size_t s = 0; s < n; ++s) {
      INFO("round " << round << " site " << sites[s]->name() << ": " << results[s].status().message());
      REQUIRE(results[s].ok());
      // The mean of s+1 over n sites, plus the shared fraction: exact in fp32.
      const float base = static_cast<float>(n + 1) / 2;
      for (std::size_t i = 0; i < values; i += 997) REQUIRE(out[s][i] == base + static_cast<float>(i % 1024) / 1024);
    }
  }
}

bool refused_with(loopback::Site& site, const std::string& text, std::chrono::milliseconds within = 5s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    const bool found = site.call([&] {
      for (const auto& r : site.mesh().rejections())
        if (r.reason.message().find(text) != std::string::npos) return true;
      return false;
    });
    if (found) return true;
    std::this_thread::sleep_for(20ms);
  }
  site.call([&] {
    for (const auto& r : site.mesh().rejections()) UNSCOPED_INFO("refused " << r.peer << ": " << r.reason.message());
    return 0;
  });
  return false;
}

bool connected(loopback::Site& site, const std::string& peer) {
  return site.call([&] {
    for (int k = 0; k <= site.mesh().control_slot(); ++k)
      if (!site.mesh().connection(peer, k)) return false;
    return true;
  });
}

constexpr std::int64_t kDay = 86400;

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("a reload on either side replaces every live connection without losing or reordering a frame") {
  auto f = federate({"a", "b"});
  auto* a = f.sites[0].get();
  auto* b = f.sites[1].get();
  std::vector<std::string> received;  // on b's thread only
  loopback::record_control_frames(*b, received);

  // a streams numbered control frames to b, one after another, through both reloads.
  constexpr int kFrames = 600;
  std::atomic<bool> sending_failed = false;
  std::thread sender([&] {
    for (int i = 1; i <= kFrames; ++i) {
      const std::string text = std::to_string(i);
      Status s = a->spawn([a, text, i]() -> asio::awaitable<Status> {
                    co_return co_await a->mesh().send_control("b", static_cast<std::uint64_t>(i),
                                                              std::as_bytes(std::span(text.data(), text.size())));
                  }).get();
      if (!s.ok()) {
        UNSCOPED_INFO("frame " << i << ": " << s.message());
        sending_failed = true;
      }
      std::this_thread::sleep_for(2ms);
    }
  });

  // b renews first (an acceptor: it asks a to redial), then a (a dialer), with
  // certificates of another lifetime, so the peer's view shows the change.
  std::this_thread::sleep_for(200ms);
  auto b2 = f.federation->issue("b", "b-renewed", {400, -300});
  REQUIRE(b2.ok());
  REQUIRE(reload(*b, *b2).ok());
  all_reduces({a, b}, 1, 6, 40000);
  auto a2 = f.federation->issue("a", "a-renewed", {500, -300});
  REQUIRE(a2.ok());
  REQUIRE(reload(*a, *a2).ok());
  all_reduces({a, b}, 7, 6, 40000);
  sender.join();
  CHECK_FALSE(sending_failed);

  std::vector<std::string> got;
  for (int tries = 0; tries < 300 && got.size() < kFrames; ++tries) {
    std::this_thread::sleep_for(10ms);
    got = b->call([&] { return received; });
  }
  REQUIRE(got.size() == kFrames);
  for (int i = 1; i <= kFrames; ++i) REQUIRE(got[i - 1] == "a:" + std::to_string(i) + ":" + std::to_string(i));

  // Three slots (2 data, 1 control), replaced twice, each retired on both sides.
  for (auto* site : {a, b}) {
    std::uint64_t replaced = 0;
    for (int tries = 0; tries < 300 && replaced < 6; ++tries) {
      std::this_thread::sleep_for(10ms);
      replaced = site->call([&] { return site->mesh().replaced_connections(); });
    }
    CHECK(replaced == 6);
    CHECK(site->call([&] { return site->mesh().rejected_frames(); }) == 0);
  }
  // Each side now holds the other's new certificate on every connection.
  const auto a_sees = a->call([&] { return a->mesh().peer_certificate_expiries(); });
  const auto b_sees = b->call([&] { return b->mesh().peer_certificate_expiries(); });
  CHECK(std::abs(a_sees.at("b") - (now_unix() + 400 * kDay)) < 3600);
  CHECK(std::abs(b_sees.at("a") - (now_unix() + 500 * kDay)) < 3600);
}

TEST_CASE("a slot's frames keep their order across a replacement, even when the old connection is slow to drain") {
  // a's egress is capped, so a 12 MiB control frame takes about half a
  // second on the old control connection; the frames after it go on the
  // replacement, and must still be handed over after it.
  auto options = loopback::test_options();
  options.rate_limit_mbit = 200;
  options.read_timeout_ms = 5000;
  options.write_timeout_ms = 5000;
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, options);
  REQUIRE(made.ok());
  auto* a = (*made)[0].get();
  auto* b = (*made)[1].get();
  std::vector<std::pair<std::uint64_t, std::size_t>> received;  // round, payload bytes; on b's thread only
  b->call([&] {
    b->mesh().set_control_handler([&received](const std::string&, const FrameHeader& h, Buffer payload) {
      received.emplace_back(h.round, payload.size());
      return Status();
    });
    return 0;
  });
  auto send = [a](std::uint64_t round, std::size_t bytes) {
    return a->spawn([a, round, bytes]() -> asio::awaitable<Status> {
      std::vector<std::byte> payload(bytes, std::byte{7});
      co_return co_await a->mesh().send_control("b", round, payload);
    });
  };
  auto control = [a] { return a->call([a] { return a->mesh().connection("b", a->mesh().control_slot()); }); };
  const auto old = control();
  auto big = send(1, 12u << 20);
  std::this_thread::sleep_for(50ms);
  REQUIRE(reload(*a, (*federation)->files("a")).ok());
  // The rest once the replacement is in, so they travel on the new connection.
  for (int tries = 0; tries < 200 && (control() == old || !control()); ++tries) std::this_thread::sleep_for(5ms);
  REQUIRE(control() != old);
  for (std::uint64_t r = 2; r <= 4; ++r) REQUIRE(send(r, 10).get().ok());
  REQUIRE(big.get().ok());
  std::vector<std::pair<std::uint64_t, std::size_t>> got;
  for (int tries = 0; tries < 500 && got.size() < 4; ++tries) {
    std::this_thread::sleep_for(10ms);
    got = b->call([&] { return received; });
  }
  CHECK(got == std::vector<std::pair<std::uint64_t, std::size_t>>{{1, 12u << 20}, {2, 10}, {3, 10}, {4, 10}});
  CHECK(b->call([&] { return b->mesh().rejected_frames(); }) == 0);
}

TEST_CASE(
    "reloads in quick succession, with connections dropping meanwhile, end with every slot connected and "
    "nothing left draining") {
  auto f = federate({"a", "b", "c"});
  auto* a = f.sites[0].get();
  auto* b = f.sites[1].get();
  auto* c = f.sites[2].get();
  std::mt19937 rng(7);
  for (int i = 0; i < 6; ++i) {
    // b and c reload (each asks a to redial and dials c or is dialed by b),
    // then a, back to back; meanwhile a drops one of its connections at random.
    for (auto* site : {b, c, a}) REQUIRE(reload(*site, f.federation->files(site->name())).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 30));
    a->call([&] {
      const std::string peer = rng() % 2 ? "b" : "c";
      if (auto conn = a->mesh().connection(peer, static_cast<int>(rng() % 3)))
        conn->close(GEOLOCO_ERROR(Err::io, "dropped by the test"));
      return 0;
    });
  }
  // However the drops fell, the mesh settles: connected, nothing draining, rounds go through.
  for (auto* site : {a, b, c}) {
    bool settled = false;
    for (int tries = 0; tries < 500 && !settled; ++tries) {
      std::this_thread::sleep_for(10ms);
      settled = site->call([&] { return site->mesh().retiring_connections() == 0; });
      for (auto* other : {a, b, c})
        if (other != site) settled = settled && connected(*site, other->name());
    }
    CHECK(settled);
  }
  all_reduces({a, b, c}, 100, 3, 30000);
  CHECK(a->call([&] { return a->mesh().replaced_connections(); }) > 0);
}

TEST_CASE("a CRL loaded by a reload cuts a revoked peer off and refuses it by name; its own reload is refused") {
  auto f = federate({"a", "b", "c"});
  auto* a = f.sites[0].get();
  auto* b = f.sites[1].get();
  auto* c = f.sites[2].get();
  const auto ca_dir = (f.federation->dir() / "ca").string();
  auto revoked = revoke_cert(ca_dir, f.federation->files("a").cert_file, 30);
  REQUIRE(revoked.ok());
  CHECK(*revoked);
  const std::string crl = (f.federation->dir() / "ca" / "crl.pem").string();

  // b and c take the CRL. b accepts a's connections: its live ones are
  // closed at once, and a's dials are refused at the handshake, naming a.
  for (auto* site : {b, c}) {
    auto files = f.federation->files(site->name());
    files.crl_file = crl;
    REQUIRE(reload(*site, files).ok());
  }
  CHECK(refused_with(*b,
                     "the certificate of a is refused since this site's TLS reload: peer certificate refused: "
                     "certificate revoked"));
  CHECK(refused_with(*b, "peer certificate refused: certificate revoked (the certificate of 'a')"));
  CHECK(refused_with(*c, "peer certificate refused: certificate revoked (the certificate of 'a')"));
  std::this_thread::sleep_for(500ms);  // a dials again and again meanwhile
  CHECK_FALSE(connected(*b, "a"));
  CHECK_FALSE(connected(*c, "a"));
  // b and c go on together, over connections replaced with the CRL in force.
  CHECK(connected(*b, "c"));
  all_reduces({b, c}, 1, 2, 20000);

  // a cannot load a CRL that revokes its own certificate.
  auto files = f.federation->files("a");
  files.crl_file = crl;
  Status own = reload(*a, files);
  CHECK(own.code() == Err::invalid_argument);
  CHECK(own.message() == "this site's certificate does not verify against the federation CA: certificate revoked");

  // A refreshed list still lists a; a list from another CA is refused.
  auto count = refresh_crl(ca_dir, 7);
  REQUIRE(count.ok());
  CHECK(*count == 1);
  auto again = revoke_cert(ca_dir, f.federation->files("a").cert_file, 30);
  REQUIRE(again.ok());
  CHECK_FALSE(*again);
}

TEST_CASE("a reload with files that cannot be used is refused and changes nothing") {
  auto f = federate({"a", "b"});
  auto* a = f.sites[0].get();
  auto* b = f.sites[1].get();
  auto good = f.federation->files("a");

  auto mismatched = good;
  mismatched.key_file = f.federation->files("b").key_file;
  Status s = reload(*a, mismatched);
  CHECK(s.code() == Err::invalid_argument);
  CHECK(s.message() ==
        cat("cannot use key ", mismatched.key_file, ": key values mismatch (x509 certificate routines)"));

  auto other_site = f.federation->files("b");
  s = reload(*a, other_site);
  CHECK(s.message() == "this site's certificate is for 'b', but the site is 'a'");

  auto other = loopback::Federation::create({"a"});
  REQUIRE(other.ok());
  REQUIRE(refresh_crl(((*other)->dir() / "ca").string(), 30).ok());
  auto foreign_crl = good;
  foreign_crl.crl_file = ((*other)->dir() / "ca" / "crl.pem").string();
  s = reload(*a, foreign_crl);
  CHECK_THAT(s.message(), Catch::Contains("is not signed by the federation CA"));

  // Two CAs trusted, a CRL from one only: the other's peers would all be refused.
  const auto bundle = (f.federation->dir() / "two-cas.pem").string();
  {
    std::ofstream out(bundle);
    out << std::ifstream(good.ca_file).rdbuf() << std::ifstream(((*other)->dir() / "ca" / "ca.pem").string()).rdbuf();
  }
  REQUIRE(refresh_crl((f.federation->dir() / "ca").string(), 30).ok());
  auto half_listed = good;
  half_listed.ca_file = bundle;
  half_listed.crl_file = (f.federation->dir() / "ca" / "crl.pem").string();
  s = reload(*a, half_listed);
  CHECK_THAT(s.message(), Catch::Contains("has no revocation list from the CA 'loopback federation', which the CA file "
                                          "trusts"));
  half_listed.crl_file = bundle + ".crls";
  {
    std::ofstream out(half_listed.crl_file);
    out << std::ifstream((f.federation->dir() / "ca" / "crl.pem").string()).rdbuf()
        << std::ifstream(foreign_crl.crl_file).rdbuf();
  }
  CHECK(reload(*a, half_listed).ok());  // a CRL for each CA: accepted

  auto missing = good;
  missing.cert_file = (f.federation->dir() / "nowhere.pem").string();
  s = reload(*a, missing);
  CHECK_THAT(s.message(), Catch::StartsWith("cannot use certificate " + missing.cert_file));

  // Nothing was replaced or closed by the refused reloads; the last one, accepted, replaced a's connections.
  std::this_thread::sleep_for(300ms);
  CHECK(a->call([&] { return a->mesh().rejected_frames(); }) == 0);
  CHECK(connected(*a, "b"));
  all_reduces({a, b}, 1, 1, 10000);
}
