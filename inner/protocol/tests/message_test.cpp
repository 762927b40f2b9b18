// Messages of the local sync protocol: every type round-trips, the bytes of
// a SYNC are pinned (golden), and every truncation, mutation and bad header
// is refused with its own message instead of crashing. Runs under
// ASan+UBSan; also replays the fuzz corpus (tests/corpus).
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "inner/protocol/message.h"

using namespace geoloco;
using namespace geoloco::inner::protocol;

namespace {

HelloMsg sample_hello() {
  return HelloMsg{"fashion-mnist", {{"fc1.weight", {256, 784}, 0}, {"fc1.bias", {256}, 200704}, {"scale", {}, 200960}}};
}

std::vector<Message> samples() {
  return {sample_hello(),
          WelcomeMsg{kWelcomeAnchorReady, 200961, {{0, 200704, 4}, {200704, 257, 5}}},
          WelcomeMsg{0, 200961, {{0, 200961, 1}}, PhasePlan{30, 0.0, 1, 29, 0.0, true, 1, 12}},
          WelcomeMsg{kWelcomeAnchorReady, 9, {{0, 9, 3}}, PhasePlan{0, 45.5, 8, 0, 0.25, false, 1, 0}},
          InitMsg{},
          SyncMsg{12, 1, 65536, 0.4375},
          SyncMsg{12, 1, 65536, 0.4375, SyncTiming{2.5, 2.75}},
          ResultMsg{12, 1, kResultStop, 13},
          ErrorMsg{Err::mismatch, true, 4, 1, 12, "SYNC is for round 12 but fragment 1 is due for round 13"}};
}

std::vector<std::byte> body_of(const std::vector<std::byte>& message) {
  return {message.begin() + kHeaderSize, message.end()};
}

Header header_of(const std::vector<std::byte>& message) {
  auto h = decode_header(std::span(message).first<kHeaderSize>(), WireLimits{});
  REQUIRE(h.ok());
  return *h;
}

std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

}  // namespace

TEST_CASE("every message type round-trips every field", "[sanitize]") {
  for (const auto& m : samples()) {
    auto bytes = encode(m);
    REQUIRE(bytes.ok());
    Header h = header_of(*bytes);
    CHECK(h.type == type_of(m));
    CHECK(h.body_size == bytes->size() - kHeaderSize);
    auto back = decode_body(h.type, body_of(*bytes));
    REQUIRE(back.ok());
    CHECK(*back == m);
  }
}

TEST_CASE("the bytes of a SYNC are pinned so the wire format cannot drift", "[sanitize]") {
  // The same bytes are written by python/geoloco/sync_client.py (its test compares them too).
  auto bytes = encode(SyncMsg{3, 1, 1000, 0.5});
  REQUIRE(bytes.ok());
  const std::vector<unsigned> expected = {'G',  'L', 'S', '1', 1, 4, 0,    0,
                                          32,   0,   0,   0,  // header: magic, version, SYNC, reserved, body length
                                          3,    0,   0,   0,   0, 0, 0,    0,      // round
                                          1,    0,   0,   0,   0, 0, 0,    0,      // fragment, reserved
                                          0xe8, 3,   0,   0,   0, 0, 0,    0,      // tokens = 1000
                                          0,    0,   0,   0,   0, 0, 0xe0, 0x3f};  // loss = 0.5 (IEEE-754 double)
  REQUIRE(bytes->size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(static_cast<unsigned>((*bytes)[i]) == expected[i]);

  // With the trainer's timing: flag bit 0, and two doubles after the loss.
  auto timed = encode(SyncMsg{3, 1, 1000, 0.5, SyncTiming{2.0, 0.25}});
  REQUIRE(timed.ok());
  const std::vector<unsigned> timed_expected = {'G',  'L', 'S', '1', 1, 4, 0,    0,    48, 0, 0, 0,  // body length 48
                                                3,    0,   0,   0,   0, 0, 0,    0,                  // round
                                                1,    0,   0,   0,   1, 0, 0,    0,      // fragment, flags = timed
                                                0xe8, 3,   0,   0,   0, 0, 0,    0,      // tokens = 1000
                                                0,    0,   0,   0,   0, 0, 0xe0, 0x3f,   // loss = 0.5
                                                0,    0,   0,   0,   0, 0, 0,    0x40,   // compute seconds = 2.0
                                                0,    0,   0,   0,   0, 0, 0xd0, 0x3f};  // loop seconds = 0.25
  REQUIRE(timed->size() == timed_expected.size());
  for (std::size_t i = 0; i < timed_expected.size(); ++i)
    CHECK(static_cast<unsigned>((*timed)[i]) == timed_expected[i]);
}

TEST_CASE("each bad header is refused with its own message", "[sanitize]") {
  auto good = *encode(SyncMsg{1, 0, 2, 3.0});
  auto patched = [&](std::size_t at, std::uint32_t value, std::size_t width) {
    auto b = good;
    std::memcpy(b.data() + at, &value, width);
    return decode_header(std::span(b).first<kHeaderSize>(), WireLimits{1024}).status();
  };
  Status magic = patched(0, 0x50545448, 4);  // "HTTP"
  CHECK(magic.code() == Err::malformed);
  CHECK_THAT(magic.message(), Catch::Contains("bad message magic"));
  Status version = patched(4, 2, 1);
  CHECK(version.code() == Err::unsupported);
  CHECK_THAT(version.message(), Catch::Contains("protocol version 2 is not supported; this side speaks version 1"));
  Status type = patched(5, 9, 1);
  CHECK(type.code() == Err::malformed);
  CHECK_THAT(type.message(), Catch::Contains("unknown message type 9"));
  Status zero_type = patched(5, 0, 1);
  CHECK_THAT(zero_type.message(), Catch::Contains("unknown message type 0"));
  Status reserved = patched(6, 1, 2);
  CHECK(reserved.code() == Err::malformed);
  CHECK_THAT(reserved.message(), Catch::Contains("reserved"));
  Status big = patched(8, 1025, 4);
  CHECK(big.code() == Err::too_large);
  CHECK_THAT(big.message(), Catch::Contains("SYNC body of 1025 bytes is over the limit of 1024"));
  CHECK(patched(8, 1024, 4).ok());
}

TEST_CASE("every truncation of every body is refused as truncated", "[sanitize]") {
  for (const auto& m : samples()) {
    if (std::holds_alternative<InitMsg>(m)) continue;  // an empty body cannot be cut
    auto bytes = *encode(m);
    auto body = body_of(bytes);
    for (std::size_t cut = 0; cut < body.size(); ++cut) {
      auto r = decode_body(type_of(m), std::span(body).first(cut));
      INFO(message_type_name(type_of(m)) << " cut at " << cut << ": " << r.status().message());
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == Err::truncated);
      CHECK_THAT(r.status().message(), Catch::StartsWith(std::string(message_type_name(type_of(m)))));
    }
  }
}

TEST_CASE("a WELCOME's phase plan is checked: a plan no trainer can follow is refused", "[sanitize]") {
  // Encoding refuses it, so a daemon cannot send one.
  WelcomeMsg both{0, 9, {{0, 9, 1}}, PhasePlan{30, 10.0, 1, 0, 0.0, false, 1, 0}};
  CHECK_THAT(encode(both).status().message(), Catch::Contains("exactly one must be set"));
  WelcomeMsg flagged{kWelcomePlan, 9, {{0, 9, 1}}};
  CHECK(encode(flagged).status().code() == Err::invalid_argument);  // the flag follows `plan`
  // Decoding refuses a hand-made one: α outside [0, 1], a merge code it does not know, a short plan.
  WelcomeMsg good{0, 9, {{0, 9, 1}}, PhasePlan{30, 0.0, 1, 5, 0.5, false, 1, 4}};
  const auto body = body_of(*encode(good));
  const std::size_t plan_at = 16 + 24;  // fixed part, one fragment
  REQUIRE(body.size() == plan_at + 64);
  auto bad_alpha = body;
  const double two = 2.0;
  std::memcpy(bad_alpha.data() + plan_at + 32, &two, 8);
  auto r = decode_body(MessageType::welcome, bad_alpha);
  CHECK(r.status().code() == Err::malformed);
  CHECK_THAT(r.status().message(), Catch::Contains("alpha 2 is outside [0, 1]"));
  auto bad_merge = body;
  bad_merge[plan_at + 40] = std::byte{7};
  CHECK_THAT(decode_body(MessageType::welcome, bad_merge).status().message(), Catch::Contains("has merge 7"));
  auto shorter = std::vector<std::byte>(body.begin(), body.end() - 8);
  CHECK(decode_body(MessageType::welcome, shorter).status().code() == Err::truncated);
  auto back = decode_body(MessageType::welcome, body);
  REQUIRE(back.ok());
  CHECK(std::get<WelcomeMsg>(*back).plan == good.plan);
}

TEST_CASE("trailing bytes, unknown flags and bad fields are malformed, each with its reason", "[sanitize]") {
  auto sync = body_of(*encode(SyncMsg{1, 0, 2, 3.0}));
  auto longer = sync;
  longer.push_back(std::byte{0});
  auto r = decode_body(MessageType::sync, longer);
  CHECK(r.status().code() == Err::malformed);
  CHECK_THAT(r.status().message(), Catch::Contains("1 bytes after its last field"));

  auto flags = sync;
  flags[12] = std::byte{2};
  CHECK_THAT(decode_body(MessageType::sync, flags).status().message(), Catch::Contains("SYNC has unknown flags 2"));
  // The timed flag on a 32-byte body: the timing it announces is missing.
  auto untimed = sync;
  untimed[12] = std::byte{1};
  auto missing = decode_body(MessageType::sync, untimed);
  CHECK(missing.status().code() == Err::truncated);
  CHECK_THAT(missing.status().message(), Catch::Contains("shorter than 48 bytes"));
  // A timing no clock gives: refused, so no status shows it.
  for (auto bad : {SyncTiming{-1.0, 2.0}, SyncTiming{1.0, std::numeric_limits<double>::quiet_NaN()},
                   SyncTiming{std::numeric_limits<double>::infinity(), 2.0}}) {
    auto body = body_of(*encode(SyncMsg{1, 0, 2, 3.0, bad}));
    auto refused = decode_body(MessageType::sync, body);
    CHECK(refused.status().code() == Err::malformed);
    CHECK_THAT(refused.status().message(), Catch::Contains("not two finite non-negative seconds"));
  }

  auto init = decode_body(MessageType::init, std::vector<std::byte>(3));
  CHECK_THAT(init.status().message(), Catch::Contains("INIT has 3 bytes after its last field"));

  auto result = body_of(*encode(ResultMsg{1, 0, 0, 2}));
  result[12] = std::byte{6};
  CHECK_THAT(decode_body(MessageType::result, result).status().message(), Catch::Contains("unknown flags 6"));

  // HELLO: dtype and rank are checked field by field.
  auto hello = *encode(sample_hello());
  auto body = body_of(hello);
  std::size_t dtype_at = 2 + 13 + 4 + 2 + 10;  // job, count, first name
  REQUIRE(static_cast<int>(body[dtype_at]) == 1);
  auto bad_dtype = body;
  bad_dtype[dtype_at] = std::byte{7};
  auto d = decode_body(MessageType::hello, bad_dtype);
  CHECK(d.status().code() == Err::malformed);
  CHECK_THAT(d.status().message(), Catch::Contains("tensor 'fc1.weight' has dtype 7; only 1 (fp32) is known"));
  auto bad_rank = body;
  bad_rank[dtype_at + 1] = std::byte{9};
  CHECK_THAT(decode_body(MessageType::hello, bad_rank).status().message(),
             Catch::Contains("tensor 'fc1.weight' has rank 9; at most 8"));
  // A tensor count the body cannot hold is refused before anything is reserved.
  auto huge_count = body;
  std::uint32_t count = 0xffffffffu;
  std::memcpy(huge_count.data() + 2 + 13, &count, 4);
  auto h = decode_body(MessageType::hello, huge_count);
  CHECK(h.status().code() == Err::truncated);
  CHECK_THAT(h.status().message(), Catch::Contains("HELLO announces 4294967295 tensors"));
}

TEST_CASE("encoding refuses what the format cannot carry, and cuts long reasons", "[sanitize]") {
  HelloMsg long_name{std::string(kMaxNameBytes + 1, 'j'), {}};
  CHECK(encode(long_name).status().code() == Err::invalid_argument);
  HelloMsg deep{"job", {{"t", std::vector<std::uint64_t>(kMaxRank + 1, 1), 0}}};
  CHECK_THAT(encode(deep).status().message(), Catch::Contains("rank 9"));
  ErrorMsg e{Err::internal, false, 0, kNoFragment, 0, std::string(kMaxReasonBytes + 100, 'x')};
  auto bytes = encode(e);
  REQUIRE(bytes.ok());
  auto back = decode_body(MessageType::error, body_of(*bytes));
  REQUIRE(back.ok());
  CHECK(std::get<ErrorMsg>(*back).reason.size() == kMaxReasonBytes);
}

TEST_CASE("the stream buffer cuts messages at any split and poisons itself on a bad header", "[sanitize]") {
  std::vector<std::byte> stream;
  for (const auto& m : samples()) {
    auto b = *encode(m);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  for (std::size_t step : {1u, 3u, 7u, 64u, 100000u}) {
    MessageBuffer buf;
    std::size_t got = 0;
    for (std::size_t at = 0; at < stream.size(); at += step) {
      buf.append(std::span(stream).subspan(at, std::min(step, stream.size() - at)));
      for (;;) {
        auto next = buf.next();
        REQUIRE(next.ok());
        if (!next->has_value()) break;
        auto m = decode_body((*next)->header.type, (*next)->body);
        REQUIRE(m.ok());
        CHECK(*m == samples()[got]);
        ++got;
      }
    }
    CHECK(got == samples().size());
    CHECK(buf.pending() == 0);
  }
  MessageBuffer buf;
  std::vector<std::byte> junk(20, std::byte{'x'});
  buf.append(junk);
  auto first = buf.next();
  CHECK(first.status().code() == Err::malformed);
  buf.append(*encode(InitMsg{}));
  CHECK(buf.next().status().code() == Err::malformed);  // still poisoned
}

TEST_CASE("mutated and truncated messages never crash the parser", "[sanitize]") {
  std::mt19937_64 rng(20261130);
  std::size_t refused = 0, accepted = 0;
  for (const auto& m : samples()) {
    auto good = *encode(m);
    for (int trial = 0; trial < 2000; ++trial) {
      auto b = good;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<std::byte>(rng());
      if (rng() % 3 == 0) b.resize(rng() % (b.size() + 1));
      MessageBuffer buf(WireLimits{1 << 16});
      buf.append(b);
      auto raw = buf.next();
      if (!raw.ok() || !raw->has_value()) {
        ++refused;
        continue;
      }
      auto decoded = decode_body((*raw)->header.type, (*raw)->body);
      if (decoded.ok()) {
        ++accepted;
        // Whatever decodes re-encodes to the same bytes: no field is silently
        // dropped. (ERROR maps unknown codes to "internal" on purpose.)
        if ((*raw)->header.type == MessageType::error) continue;
        auto again = encode(*decoded);
        REQUIRE(again.ok());
        CHECK(body_of(*again) == (*raw)->body);
      } else {
        ++refused;
        CHECK_FALSE(decoded.status().message().empty());
      }
    }
  }
  CHECK(refused > 1000);
  CHECK(accepted > 100);  // flips inside numeric fields keep the message valid
}

TEST_CASE("the fuzz corpus replays cleanly and its named seeds decode as expected", "[sanitize]") {
  std::filesystem::path dir = "tests/corpus";
  REQUIRE(std::filesystem::is_directory(dir));
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    auto bytes = read_file(entry.path());
    MessageBuffer buf;
    buf.append(bytes);
    for (int i = 0; i < 16; ++i) {
      auto raw = buf.next();
      if (!raw.ok() || !raw->has_value()) break;
      (void)decode_body((*raw)->header.type, (*raw)->body);
    }
    ++files;
  }
  CHECK(files >= 4);
  // sync.bin was written by the Python client: both sides agree on the bytes.
  auto py = read_file(dir / "sync.bin");
  MessageBuffer buf;
  buf.append(py);
  auto raw = buf.next();
  REQUIRE(raw.ok());
  REQUIRE(raw->has_value());
  auto m = decode_body((*raw)->header.type, (*raw)->body);
  REQUIRE(m.ok());
  CHECK(std::get<SyncMsg>(*m) == SyncMsg{3, 1, 1000, 0.5});

  // hello.bin too: Python's layout_of lays tensors out as check_layout wants.
  MessageBuffer hb;
  hb.append(read_file(dir / "hello.bin"));
  auto hraw = hb.next();
  REQUIRE(hraw.ok());
  REQUIRE(hraw->has_value());
  auto hello = decode_body((*hraw)->header.type, (*hraw)->body);
  REQUIRE(hello.ok());
  const auto& h = std::get<HelloMsg>(*hello);
  CHECK(h.job == "mlp-test");
  REQUIRE(h.layout.size() == 4);
  CHECK(h.layout[2] == TensorDesc{"fc2.weight", {3, 4}, 28});
  CHECK(h.layout[3] == TensorDesc{"fc2.bias", {3}, 40});
}
