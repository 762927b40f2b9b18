// A repeated line is logged once per window with its count; different lines
// pass as they come; a condition that stopped is still counted.
#include <catch2/catch.hpp>

#include "common/repeat_filter.h"

using namespace geoloco;
using namespace std::chrono_literals;
using Strings = std::vector<std::string>;

TEST_CASE("a line repeated within the window is counted, and the count said once") {
  RepeatFilter f(30s);
  const auto t0 = RepeatFilter::Clock::time_point{} + 1000s;
  const std::string abort = "round 12 aborted: anchor digests differ after round 12: a has 1, b has 2";
  CHECK(f.admit(abort, t0) == Strings{abort});
  for (int i = 1; i <= 244; ++i) CHECK(f.admit(abort, t0 + i * 100ms).empty());
  // Other lines pass meanwhile.
  CHECK(f.admit("round 13 committed", t0 + 25s) == Strings{"round 13 committed"});
  // The next after the window: its repeats are counted, then it is logged.
  const Strings later = f.admit(abort, t0 + 31s);
  CHECK(later == Strings{abort + " (and 244 more times in 31 s)", abort});
  CHECK(f.admit(abort, t0 + 32s).empty());
}

TEST_CASE("a condition that stopped repeating is counted by flush, once") {
  RepeatFilter f(10s);
  const auto t0 = RepeatFilter::Clock::time_point{} + 1000s;
  CHECK(f.admit("site-c is silent", t0) == Strings{"site-c is silent"});
  CHECK(f.admit("site-c is silent", t0 + 1s).empty());
  CHECK(f.flush(t0 + 5s).empty());  // still within the window
  CHECK(f.flush(t0 + 10s) == Strings{"site-c is silent (and 1 more time in 10 s)"});
  CHECK(f.flush(t0 + 20s).empty());
  // A line that never repeated leaves nothing to say.
  CHECK(f.admit("once", t0 + 21s) == Strings{"once"});
  CHECK(f.flush(t0 + 40s).empty());
  CHECK(f.admit("site-c is silent", t0 + 41s) == Strings{"site-c is silent"});
}

TEST_CASE("at the job's end every count not yet said is said") {
  RepeatFilter f(30s);
  const auto t0 = RepeatFilter::Clock::time_point{} + 1000s;
  f.admit("a", t0);
  f.admit("a", t0 + 1s);
  f.admit("a", t0 + 2s);
  f.admit("b", t0 + 2s);
  CHECK(f.drain(t0 + 4s) == Strings{"a (and 2 more times in 4 s)"});
  CHECK(f.drain(t0 + 5s).empty());
}
