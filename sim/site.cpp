#include "sim/site.h"

#include <algorithm>

#include "inner/protocol/layout.h"

namespace geoloco::sim {

namespace protocol = inner::protocol;

SimulatedSite::SimulatedSite(Monitor& monitor, std::uint32_t fragments, bool streaming, bool initializes)
    : monitor_(monitor), fragments_count_(fragments), streaming_(streaming), initializes_(initializes) {}

std::span<float> SimulatedSite::fragment_values(std::uint32_t f) {
  const auto& d = table_.at(f);
  return std::span<float>(segment_).subspan(d.offset, d.length);
}

inner::ChannelFactory SimulatedSite::factory() {
  return [this](const Layout& layout) -> Result<std::unique_ptr<inner::SyncChannel>> {
    // The table TrainerHost welcomes with, for the job's first round.
    auto table = protocol::welcome_table(layout, fragments_count_, 1, streaming_);
    if (!table.ok()) return table.status();
    std::unique_lock lock(monitor_.mutex);
    table_ = std::move(*table);
    segment_.assign(layout_values(layout), 0.0f);
    connected_ = true;
    monitor_.changed.notify_all();
    if (!initializes_) {
      monitor_.changed.wait(lock, [&] { return published_ || !monitor_.aborted.ok(); });
      if (!monitor_.aborted.ok()) return monitor_.aborted;
      anchor_ready_ = true;
    }
    // The channel is this site; it outlives the trainer's use of it (the federation owns both).
    struct Borrowed final : inner::SyncChannel {
      explicit Borrowed(SimulatedSite& s) : site(s) {}
      bool anchor_ready() const override { return site.anchor_ready(); }
      std::span<float> parameters() override { return site.parameters(); }
      std::span<float> fragment_values(std::uint32_t f) override { return site.fragment_values(f); }
      const std::vector<protocol::FragmentDesc>& fragments() const override { return site.fragments(); }
      Status send_initial(int t) override { return site.send_initial(t); }
      Status sync(const protocol::SyncMsg& m) override { return site.sync(m); }
      Result<protocol::ResultMsg> wait_result(int t) override { return site.wait_result(t); }
      SimulatedSite& site;
    };
    return std::unique_ptr<inner::SyncChannel>(new Borrowed(*this));
  };
}

Status SimulatedSite::send_initial(int) {
  std::unique_lock lock(monitor_.mutex);
  GEOLOCO_RETURN_IF(!initializes_, Err::invalid_argument, "this simulated site was welcomed with the anchor");
  initial_ready_ = true;
  monitor_.changed.notify_all();
  monitor_.changed.wait(lock, [&] { return published_ || !monitor_.aborted.ok(); });
  if (!monitor_.aborted.ok()) return monitor_.aborted;
  anchor_ready_ = true;
  return {};
}

void SimulatedSite::publish_anchor(std::span<const float> anchor) {
  std::copy(anchor.begin(), anchor.end(), segment_.begin());
  published_ = true;
  monitor_.changed.notify_all();
}

Status SimulatedSite::sync(const inner::protocol::SyncMsg& m) {
  std::lock_guard lock(monitor_.mutex);
  GEOLOCO_RETURN_IF(m.fragment >= table_.size() || table_[m.fragment].next_round != m.round, Err::invalid_argument,
                    "SYNC of round ", m.round, " fragment ", m.fragment, " out of turn");
  // The trainer's timing is geolocod's to show; the simulator models time itself.
  pending_.push_back({m.round, m.fragment, m.tokens, m.loss});
  monitor_.changed.notify_all();
  return {};
}

void SimulatedSite::answer(std::uint32_t fragment, std::span<const float> anchor, std::uint64_t next_round, bool stop) {
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const SiteSync& s) { return s.fragment == fragment; });
  if (it == pending_.end()) return;
  const std::uint64_t round = it->round;
  pending_.erase(it);
  const auto& d = table_[fragment];
  std::copy(anchor.begin() + static_cast<long>(d.offset), anchor.begin() + static_cast<long>(d.offset + d.length),
            segment_.begin() + static_cast<long>(d.offset));
  results_.push_back({round, fragment, stop ? protocol::kResultStop : 0u, next_round});
  monitor_.changed.notify_all();
}

Result<protocol::ResultMsg> SimulatedSite::wait_result(int) {
  std::unique_lock lock(monitor_.mutex);
  monitor_.changed.wait(lock, [&] { return !results_.empty() || !monitor_.aborted.ok(); });
  if (!monitor_.aborted.ok()) return monitor_.aborted;
  auto r = results_.front();
  results_.erase(results_.begin());
  table_[r.fragment].next_round = r.next_round;  // the trainer's table, on its thread (as the client keeps it)
  return r;
}

void SimulatedSite::finished(Status status) {
  done_ = true;
  status_ = std::move(status);
  monitor_.changed.notify_all();
}

}  // namespace geoloco::sim
