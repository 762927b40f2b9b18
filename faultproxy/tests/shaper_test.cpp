// The Shaper's timing with a fixed clock: delay, jitter (bounded, order
// kept, the same for the same seed), the link's rate cap shared by two
// connections, slicing, close_after and the blackhole.
#include <catch2/catch.hpp>

#include "faultproxy/shaper.h"

using namespace geoloco::faultproxy;

TEST_CASE("no faults: every byte at once, in one piece") {
  Shaper s(1);
  LinkClock clock;
  const auto r = s.shape({}, 2.5, 1000, clock);
  REQUIRE(r.pieces.size() == 1);
  CHECK(r.pieces[0].at_s == 2.5);
  CHECK(r.pieces[0].offset == 0);
  CHECK(r.pieces[0].length == 1000);
  CHECK(r.dropped == 0);
  CHECK_FALSE(r.cut);
  CHECK(s.passed() == 1000);
}

TEST_CASE("latency delays each read; jitter stays within its bound and never reorders") {
  DirectionFaults f;
  f.latency_s = 0.05;
  Shaper plain(1);
  LinkClock clock;
  CHECK(plain.shape(f, 1.0, 10, clock).pieces[0].at_s == Approx(1.05));

  f.jitter_s = 0.04;
  Shaper a(7), b(7), c(8);
  double last = 0, spread_min = 1, spread_max = -1;
  std::vector<double> times_a, times_b, times_c;
  for (int i = 0; i < 200; ++i) {
    const double now = i * 0.001;  // reads 1 ms apart, jitter 40 ms: reordering would be easy
    const double at = a.shape(f, now, 1, clock).pieces[0].at_s;
    times_a.push_back(at);
    times_b.push_back(b.shape(f, now, 1, clock).pieces[0].at_s);
    times_c.push_back(c.shape(f, now, 1, clock).pieces[0].at_s);
    CHECK(at >= last);                // the byte order is kept
    CHECK(at <= now + 0.09 + 1e-12);  // at most latency + jitter
    CHECK(at >= now + 0.01 - 1e-12);  // at least latency - jitter
    spread_min = std::min(spread_min, at - now);
    spread_max = std::max(spread_max, at - now);
    last = at;
  }
  CHECK(times_a == times_b);  // the same seed gives the same times
  CHECK(times_a != times_c);
  CHECK(spread_max - spread_min > 0.02);  // the jitter is there
}

TEST_CASE("a rate cap serializes the link's bytes, across its connections") {
  DirectionFaults f;
  f.rate_bps = 8e6;  // 1 MB/s
  LinkClock link;
  Shaper one(1), two(2);
  // 100 kB at t=0 on one connection, then 100 kB at t=0 on another: the
  // second waits for the first.
  CHECK(one.shape(f, 0, 100000, link).pieces[0].at_s == Approx(0.1));
  CHECK(two.shape(f, 0, 100000, link).pieces[0].at_s == Approx(0.2));
  // After the link went idle, a read starts at its own time.
  CHECK(one.shape(f, 5.0, 1000, link).pieces[0].at_s == Approx(5.001));
  // Reads are paced: the next is taken just before the link is free.
  CHECK(Shaper::read_ready_at(f, link, 4.9) == Approx(5.001 - kPaceAheadSeconds).margin(1e-12));
  CHECK(Shaper::read_ready_at(f, link, 5.0) == 5.0);
  CHECK(Shaper::read_ready_at(f, link, 6.0) == 6.0);
  CHECK(Shaper::read_ready_at(DirectionFaults{}, link, 5.0) == 5.0);
  // With latency on top: serialization, then the delay.
  f.latency_s = 0.1;
  LinkClock fresh;
  Shaper three(3);
  CHECK(three.shape(f, 0, 1000, fresh).pieces[0].at_s == Approx(0.101));
}

TEST_CASE("slicing cuts a read into pieces a slice delay apart") {
  DirectionFaults f;
  f.slice_bytes = 3;
  f.slice_delay_s = 0.002;
  Shaper s(1);
  LinkClock clock;
  const auto r = s.shape(f, 1.0, 10, clock);
  REQUIRE(r.pieces.size() == 4);
  const std::size_t lengths[] = {3, 3, 3, 1};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(r.pieces[i].offset == 3 * i);
    CHECK(r.pieces[i].length == lengths[i]);
    CHECK(r.pieces[i].at_s == Approx(1.0 + 0.002 * i));
  }
  // The next read's first piece keeps the spacing from the last one.
  CHECK(s.shape(f, 1.0, 2, clock).pieces[0].at_s == Approx(1.008));
}

TEST_CASE("close_after passes exactly N bytes, then cuts") {
  DirectionFaults f;
  f.close_after_bytes = 25;
  Shaper s(1);
  LinkClock clock;
  auto r = s.shape(f, 0, 10, clock);
  CHECK_FALSE(r.cut);
  CHECK(r.pieces[0].length == 10);
  r = s.shape(f, 0, 10, clock);
  CHECK_FALSE(r.cut);
  r = s.shape(f, 0, 10, clock);
  CHECK(r.cut);
  REQUIRE(r.pieces.size() == 1);
  CHECK(r.pieces[0].length == 5);
  CHECK(r.dropped == 5);
  CHECK(s.passed() == 25);
  // Exactly at the limit: cut, nothing more passes.
  Shaper exact(2);
  r = exact.shape(f, 0, 25, clock);
  CHECK(r.cut);
  CHECK(r.pieces[0].length == 25);
  CHECK(r.dropped == 0);
}

TEST_CASE("a blackhole drops what it reads and delivers nothing") {
  DirectionFaults f;
  f.blackhole = true;
  f.latency_s = 1;
  Shaper s(1);
  LinkClock clock;
  const auto r = s.shape(f, 0, 4096, clock);
  CHECK(r.pieces.empty());
  CHECK(r.dropped == 4096);
  CHECK(s.passed() == 0);
  CHECK(clock.free_at_s == 0);
}
