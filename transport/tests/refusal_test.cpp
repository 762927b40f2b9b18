// Bad peers are refused, each with its own message, while the honest sites'
// all-reduce completes: a certificate from another CA, a certificate for
// another site name, an expired certificate, a plaintext client, a frame
// with a huge length, a corrupted checksum, a wrong version, a replayed
// frame of an earlier round, and knocks in another's name or the wrong way.
#include <asio/connect.hpp>
#include <asio/ssl.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "transport/allreduce.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::transport;
using namespace std::chrono_literals;

namespace {

// A misbehaving client, synchronous, on the test's own thread.
class Rogue {
 public:
  // TLS with the given client certificate; it trusts the real CA so that the
  // server's refusal, not its own, is what is tested.
  Rogue(std::uint16_t port, const tls::TlsFiles& mine, const std::string& real_ca)
      : ssl_(context(mine, real_ca)), stream_(io_, ssl_) {
    std::error_code ec;
    stream_.next_layer().connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    if (!ec) stream_.handshake(asio::ssl::stream_base::client, ec);
    handshake_ok_ = !ec;
  }
  void send(const FrameHeader& h, std::span<const std::byte> payload, int version = 1) {
    auto head = encode_header(h);
    head[4] = static_cast<std::byte>(version);
    std::error_code ec;
    asio::write(stream_, asio::buffer(head.data(), head.size()), ec);
    if (!payload.empty()) asio::write(stream_, asio::buffer(payload.data(), payload.size()), ec);
  }
  // A hello for slot 0, from a site with `connections` data connections per peer.
  void hello(const std::string& name, std::uint64_t job = 1, std::uint32_t connections = 2) {
    FrameHeader h;
    h.type = FrameType::hello;
    h.job = job;
    set_hello_connections(h, connections);
    auto payload = std::as_bytes(std::span(name.data(), name.size()));
    seal(h, payload);
    send(h, payload);
    std::array<std::byte, kFrameHeaderSize + 64> reply{};
    std::error_code ec;
    stream_.read_some(asio::buffer(reply.data(), reply.size()), ec);  // the server's hello
  }
  // A knock: "dial me now", from a site the server dials.
  void knock(const std::string& name) {
    FrameHeader h;
    h.type = FrameType::knock;
    auto payload = std::as_bytes(std::span(name.data(), name.size()));
    seal(h, payload);
    send(h, payload);
  }
  bool handshake_ok() const { return handshake_ok_; }

 private:
  // The certificate must be in the context before the stream copies it.
  static asio::ssl::context context(const tls::TlsFiles& mine, const std::string& real_ca) {
    asio::ssl::context ssl(asio::ssl::context::tls_client);
    ssl.load_verify_file(real_ca);
    ssl.use_certificate_chain_file(mine.cert_file);
    ssl.use_private_key_file(mine.key_file, asio::ssl::context::pem);
    ssl.set_verify_mode(asio::ssl::verify_none);
    return ssl;
  }

  asio::io_context io_;
  asio::ssl::context ssl_;
  asio::ssl::stream<asio::ip::tcp::socket> stream_;
  bool handshake_ok_ = false;
};

// Waits until site a has refused something whose message contains `text`.
bool refused_with(loopback::Site& a, const std::string& text, std::chrono::milliseconds within = 5s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    const bool found = a.call([&] {
      for (const auto& r : a.mesh().rejections())
        if (r.reason.message().find(text) != std::string::npos) return true;
      return false;
    });
    if (found) return true;
    std::this_thread::sleep_for(20ms);
  }
  a.call([&] {
    for (const auto& r : a.mesh().rejections()) UNSCOPED_INFO("refused " << r.peer << ": " << r.reason.message());
    return 0;
  });
  return false;
}

}  // namespace

TEST_CASE("bad peers are refused with their own messages while honest sites all-reduce") {
  const std::vector<std::string> honest{"a", "b", "c"};
  auto fed = loopback::Federation::create({"a", "b", "c", "mallory"});
  REQUIRE(fed.ok());
  auto& federation = **fed;
  auto other = loopback::Federation::create({"eve"});  // another federation
  REQUIRE(other.ok());
  const auto eve = (*other)->files("eve");
  auto expired = federation.issue("mallory", "mallory-expired", {1, -3 * 86400});
  REQUIRE(expired.ok());
  const auto real_ca = federation.files("a").ca_file;

  auto options = loopback::test_options();
  options.rate_limit_mbit = 60;  // the honest exchange takes ~1 s, so the attacks overlap it
  // mallory is a configured peer of every site (it holds a valid certificate)
  // but takes part in no all-reduce.
  auto made = loopback::make_sites(federation, honest, options, 1, {"a", "b", "c", "mallory"});
  REQUIRE(made.ok());
  auto& sites = *made;
  loopback::Site& a = *sites[0];

  const std::size_t n = 1500000;
  std::vector<std::vector<float>> in(3, std::vector<float>(n)), out(3, std::vector<float>(n));
  for (int s = 0; s < 3; ++s)
    for (std::size_t i = 0; i < n; ++i) in[s][i] = float(s + 1);
  auto run_round = [&](std::uint64_t round) {
    std::vector<std::future<Result<AllReduceStats>>> futures;
    for (int s = 0; s < 3; ++s) {
      AllReduceRequest r;
      r.key = {round, 0};
      r.participants = honest;
      r.weights = {1, 1, 2};
      r.input = in[s];
      r.output = out[s];
      r.timeout = 60s;
      Mesh& mesh = sites[s]->mesh();
      futures.push_back(sites[s]->spawn([&mesh, r]() { return all_reduce(mesh, r); }));
    }
    return futures;
  };

  // Round 1 completes, so a later replay of it is stale.
  auto round1 = run_round(1);
  for (const auto& r : loopback::wait_all(round1)) REQUIRE(r.ok());
  auto round2 = run_round(2);

  SECTION("the attacks") {
    // The honest round is still under way when the attacks begin.
    CHECK(round2[0].wait_for(0s) == std::future_status::timeout);
    { Rogue r(a.port(), eve, real_ca); }
    CHECK(refused_with(a, "peer certificate refused: unable to get local issuer certificate"));

    { Rogue r(a.port(), *expired, real_ca); }
    CHECK(refused_with(a, "peer certificate refused: certificate has expired"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      REQUIRE(r.handshake_ok());
      r.hello("b");  // mallory's certificate, claiming to be b
    }
    CHECK(refused_with(a, "certificate is for 'mallory', the peer claims to be 'b'"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      r.knock("c");  // a dials c: a knock in c's name, under mallory's certificate
    }
    CHECK(refused_with(a, "certificate is for 'mallory', the peer claims to be 'c'"));
    {
      Rogue r(sites[1]->port(), federation.files("a"), real_ca);
      r.knock("a");  // b does not dial a: a dials b
    }
    CHECK(refused_with(*sites[1], "knock from a, which dials this site"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      r.hello("mallory", 1, 3);  // configured with another connections_per_peer
    }
    CHECK(refused_with(a,
                       "mallory has transport.connections_per_peer 3, this site 2: they must be the same on every "
                       "site"));

    {
      asio::io_context io;
      asio::ip::tcp::socket plain(io);
      plain.connect({asio::ip::make_address("127.0.0.1"), a.port()});
      FrameHeader h;
      h.type = FrameType::hello;
      auto head = encode_header(h);
      asio::write(plain, asio::buffer(head.data(), head.size()));
      std::this_thread::sleep_for(100ms);
    }
    CHECK(refused_with(a, "TLS handshake with 127.0.0.1:"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      r.hello("mallory");
      FrameHeader h;
      h.type = FrameType::shard;
      h.job = 1;
      h.round = 2;
      h.payload_size = 1ull << 40;
      r.send(h, {});
    }
    CHECK(refused_with(a, "frame payload of 1099511627776 bytes exceeds the bound"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      const std::string name = "mallory";
      FrameHeader h;
      h.type = FrameType::hello;
      h.job = 1;
      auto payload = std::as_bytes(std::span(name.data(), name.size()));
      seal(h, payload);
      h.payload_hash ^= 1;  // corrupted in transit
      r.send(h, payload);
    }
    CHECK(refused_with(a, "frame checksum mismatch"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      FrameHeader h;
      h.type = FrameType::hello;
      h.job = 1;
      seal(h, {});
      r.send(h, {}, /*version=*/7);
    }
    CHECK(refused_with(a, "frame version 7 is not supported"));

    {
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      r.hello("mallory");
      std::vector<std::byte> payload(64, std::byte{1});
      FrameHeader h;
      h.type = FrameType::shard;
      h.job = 1;
      h.round = 1;  // a replay of the finished round
      seal(h, payload);
      r.send(h, payload);
    }
    CHECK(refused_with(a, "stale frame from mallory: shard of round 1 attempt 0, which is over"));

    {
      // A hello that claims a frame-sized name: refused on its header, before
      // 64 MiB are read into memory.
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      FrameHeader h;
      h.type = FrameType::hello;
      h.job = 1;
      h.payload_size = 64ull << 20;
      r.send(h, {});
    }
    CHECK(refused_with(a, "a hello of 67108864 bytes; a site name is at most 64"));

    {
      // Keepalives but never a hello: closed at the connect timeout (3 s here).
      Rogue r(a.port(), federation.files("mallory"), real_ca);
      REQUIRE(r.handshake_ok());
      FrameHeader k;
      k.type = FrameType::keepalive;
      seal(k, {});
      for (int i = 0; i < 14; ++i) {
        r.send(k, {});
        std::this_thread::sleep_for(300ms);
      }
      CHECK(refused_with(a, "no hello within 3000 ms of the handshake", 1s));
    }

    // Through all of it, the honest exchange completed, with the right answer.
    for (auto& f : round2) {
      auto res = f.get();
      INFO(res.status().message());
      CHECK(res.ok());
    }
    for (int s = 0; s < 3; ++s) CHECK(out[s][12345] == (1.0f + 2.0f + 2 * 3.0f) / 4);
    CHECK(a.call([&] { return a.mesh().rejected_frames(); }) >= 8);
  }
}

TEST_CASE("a flood of bad connections is refused one by one but logged once, with its count") {
  auto fed = loopback::Federation::create({"a", "b"});
  REQUIRE(fed.ok());
  auto made = loopback::make_sites(**fed, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  loopback::Site& a = *(*made)[0];
  auto counts = [&] {
    return a.call([&] { return std::pair(a.mesh().rejected_frames(), a.mesh().refusal_lines_logged()); });
  };
  const auto [refused_before, lines_before] = counts();
  // 20 plaintext clients from 20 ports: the same refusal but for the port.
  for (int i = 0; i < 20; ++i) {
    asio::io_context io;
    asio::ip::tcp::socket plain(io);
    plain.connect({asio::ip::make_address("127.0.0.1"), a.port()});
    const std::string junk(64, 'x');
    asio::write(plain, asio::buffer(junk));
  }
  for (int tries = 0; tries < 250 && counts().first < refused_before + 20; ++tries) std::this_thread::sleep_for(20ms);
  const auto [refused, lines] = counts();
  CHECK(refused == refused_before + 20);  // each one refused and counted
  CHECK(lines == lines_before + 1);       // one warning; the other 19 wait to be said as a count
  // Every refusal is still in the list, with its own peer.
  CHECK(a.call([&] { return a.mesh().rejections().size(); }) >= 20);
}

TEST_CASE("a plain TCP connection refuses an all-reduce frame without its payload hash") {
  // Over TLS a shard or gather frame may skip the hash: the record's tag
  // proves its bytes. Over plain TCP nothing else does.
  auto fed = loopback::Federation::create({"a", "m"});
  REQUIRE(fed.ok());
  auto options = loopback::test_options();
  options.insecure_plaintext_for_tests = true;
  auto made = loopback::make_sites(**fed, {"a"}, options, 1, {"a", "m"});
  REQUIRE(made.ok());
  loopback::Site& a = *(*made)[0];
  asio::io_context io;
  asio::ip::tcp::socket plain(io);
  plain.connect({asio::ip::make_address("127.0.0.1"), a.port()});
  auto send = [&](FrameHeader h, std::span<const std::byte> payload) {
    seal(h, payload);
    const auto head = encode_header(h);
    asio::write(plain, asio::buffer(head.data(), head.size()));
    if (!payload.empty()) asio::write(plain, asio::buffer(payload.data(), payload.size()));
  };
  const std::string name = "m";
  FrameHeader hello;
  hello.type = FrameType::hello;
  hello.job = 1;
  set_hello_connections(hello, options.connections_per_peer);
  send(hello, std::as_bytes(std::span(name.data(), name.size())));
  std::vector<std::byte> payload(64, std::byte{1});
  FrameHeader shard;
  shard.type = FrameType::shard;
  shard.job = 1;
  shard.round = 5;
  shard.hashed = false;
  send(shard, payload);
  CHECK(refused_with(a, "shard frame without its payload hash on a plain TCP connection"));
}
