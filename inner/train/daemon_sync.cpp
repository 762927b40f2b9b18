#include "inner/train/daemon_sync.h"

#include <algorithm>

#include "diloco/fragments.h"
#include "inner/train/streaming.h"

namespace geoloco::inner {

Result<std::unique_ptr<DaemonSync>> DaemonSync::connect(const ChannelFactory& channel, const ParamLayout& layout,
                                                        int timeout_ms) {
  auto connected = channel(layout.tensors());
  if (!connected.ok()) return connected.status();
  GEOLOCO_RETURN_IF((*connected)->parameters().size() != layout.total(), Err::mismatch, "the daemon's segment holds ",
                    (*connected)->parameters().size(), " values, the model has ", layout.total());
  return std::unique_ptr<DaemonSync>(new DaemonSync(std::move(*connected), timeout_ms));
}

DaemonSync::DaemonSync(std::unique_ptr<SyncChannel> channel, int timeout_ms)
    : channel_(std::move(channel)), timeout_ms_(timeout_ms) {}

std::vector<std::uint64_t> DaemonSync::next_rounds() const {
  std::vector<std::uint64_t> rounds;
  for (const auto& f : channel_->fragments()) rounds.push_back(f.next_round);
  return rounds;
}

std::uint64_t DaemonSync::next_round() const { return sync_round(next_rounds()); }

Status DaemonSync::hand_over_initial() { return channel_->send_initial(timeout_ms_); }

Result<protocol::ResultMsg> DaemonSync::wait_result() { return channel_->wait_result(timeout_ms_); }

Status DaemonSync::sync(SyncPoint& point, const protocol::SyncTiming& timing) {
  // The replica already lives in the segment (training runs in place).
  const auto fragments = static_cast<std::uint32_t>(channel_->fragments().size());
  for (std::uint32_t f = 0; f < fragments; ++f)
    GEOLOCO_TRY(channel_->sync(
        protocol::SyncMsg{channel_->fragments()[f].next_round, f, point.work_units, point.mean_loss, timing}));
  for (std::uint32_t f = 0; f < fragments; ++f) {
    auto result = wait_result();
    if (!result.ok()) return result.status();
    if (result->stop()) point.stop = true;
  }
  ++syncs_;
  return {};
}

Result<std::vector<std::uint32_t>> DaemonSync::hand_out(std::span<const float> replica, std::uint64_t tokens,
                                                        double loss, const protocol::SyncTiming& timing) {
  GEOLOCO_RETURN_IF(!in_flight_.empty(), Err::internal, "fragment ", in_flight_.front(),
                    " is still in flight; it must be merged before the next sync");
  const std::uint64_t round = next_round();
  for (std::uint32_t f : fragments_due(next_rounds())) {
    // The daemon reads the segment; the trainer's own copy keeps training.
    const auto& desc = channel_->fragments()[f];
    auto values = replica.subspan(desc.offset, desc.length);
    std::copy(values.begin(), values.end(), channel_->fragment_values(f).begin());
    if (delayed_) {
      if (at_sync_.size() != replica.size()) at_sync_.assign(replica.size(), 0.0f);
      std::copy(values.begin(), values.end(), at_sync_.begin() + static_cast<std::ptrdiff_t>(desc.offset));
    }
    GEOLOCO_TRY(channel_->sync(protocol::SyncMsg{round, f, tokens, loss, timing}));
    in_flight_.push_back(f);
  }
  ++syncs_;
  return in_flight_;
}

Result<bool> DaemonSync::merge(std::span<float> replica, double alpha) {
  bool stop = false;
  // RESULTs may come in any order; each names its fragment.
  for (std::size_t left = in_flight_.size(); left > 0; --left) {
    auto result = wait_result();
    if (!result.ok()) return result.status();
    const auto& desc = channel_->fragments()[result->fragment];
    auto local = replica.subspan(desc.offset, desc.length);
    if (delayed_)
      GEOLOCO_TRY(diloco::merge_fragment_delayed(local, channel_->fragment_values(result->fragment),
                                                 std::span<const float>(at_sync_).subspan(desc.offset, desc.length)));
    else GEOLOCO_TRY(diloco::merge_fragment(local, channel_->fragment_values(result->fragment), alpha));
    stop = stop || result->stop();
  }
  in_flight_.clear();
  return stop;
}

}  // namespace geoloco::inner
