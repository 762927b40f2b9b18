// The history when the disk refuses writes: records wait in order with the
// time they happened, the first failure and the recovery are each said
// once, and nothing is written out of order or twice.
#include <catch2/catch.hpp>

#include "history/buffered_history.h"

using namespace geoloco;
using namespace geoloco::history;

TEST_CASE("records that cannot be written wait, in order, and are written once there is room") {
  std::vector<Record> disk;
  bool full = false;
  BufferedHistory h([&](const Record& r) -> Status {
    if (full) return Status(Err::io, "history h: write failed: No space left on device");
    disk.push_back(r);
    return {};
  });
  auto change = h.append(TrainerTokens{1, 0, 640}, 1000);
  CHECK_FALSE(change.blocked);
  CHECK(change.message.empty());
  CHECK(disk.size() == 1);

  full = true;
  change = h.append(Committed{}, 2000);
  CHECK(change.blocked);
  CHECK(change.message ==
        "the history cannot be written (history h: write failed: No space left on device): its records wait in "
        "memory, and this site's trainer work is kept out of rounds until they are on disk");
  CHECK(h.blocked());
  change = h.append(TrainerTokens{2, 0, 640}, 3000);
  CHECK_FALSE(change.blocked);  // said once
  CHECK(change.message.empty());
  change = h.retry(4000);
  CHECK(change.message.empty());
  CHECK(h.waiting() == 2);
  CHECK(disk.size() == 1);

  full = false;
  change = h.retry(6500);
  CHECK(change.unblocked);
  CHECK(change.message == "the history is written again after 4.5 s (2 waiting record(s) written)");
  CHECK_FALSE(h.blocked());
  REQUIRE(disk.size() == 3);
  CHECK(std::holds_alternative<Committed>(disk[1].event));
  CHECK(disk[1].t_ms == 2000);  // the time it happened, not the time it was written
  CHECK(std::get<TrainerTokens>(disk[2].event).round == 2);
  CHECK(disk[2].t_ms == 3000);
  change = h.append(TrainerTokens{3, 0, 640}, 7000);
  CHECK(change.message.empty());
  CHECK(disk.size() == 4);
}

TEST_CASE("a record that fails part way is retried from where it stopped, never skipped") {
  std::vector<int> rounds;
  int fail_at = 2;  // the second write fails once
  int calls = 0;
  BufferedHistory h([&](const Record& r) -> Status {
    ++calls;
    if (calls == fail_at) return Status(Err::io, "full");
    rounds.push_back(static_cast<int>(std::get<TrainerTokens>(r.event).round));
    return {};
  });
  h.append(TrainerTokens{1, 0, 1}, 0);
  h.append(TrainerTokens{2, 0, 1}, 0);  // fails, waits
  h.append(TrainerTokens{3, 0, 1}, 0);  // written after 2, not before
  CHECK(rounds == std::vector<int>{1, 2, 3});
  CHECK_FALSE(h.blocked());
}
