#include "inner/train/daemon_sync.h"

#include <algorithm>

#include "inner/train/streaming.h"

namespace geoloco::inner {

protocol::Layout to_protocol_layout(const ParamLayout& layout) {
  protocol::Layout out;
  for (const auto& t : layout.tensors()) {
    protocol::TensorDesc d;
    d.name = t.name;
    d.shape.assign(t.shape.begin(), t.shape.end());
    d.offset = t.offset;
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::unique_ptr<DaemonSync>> DaemonSync::connect(const std::string& socket_path, const std::string& job,
                                                        const ParamLayout& layout, int timeout_ms) {
  protocol::ClientOptions options;
  options.connect_timeout_ms = timeout_ms;
  auto client = protocol::Client::connect(socket_path, job, to_protocol_layout(layout), options);
  if (!client.ok()) return client.status();
  GEOLOCO_RETURN_IF((*client)->parameters().size() != layout.total(), Err::mismatch, "the daemon's segment holds ",
                    (*client)->parameters().size(), " values, the model has ", layout.total());
  return std::unique_ptr<DaemonSync>(new DaemonSync(std::move(*client), timeout_ms));
}

DaemonSync::DaemonSync(std::unique_ptr<protocol::Client> client, int timeout_ms)
    : client_(std::move(client)), timeout_ms_(timeout_ms) {}

std::vector<std::uint64_t> DaemonSync::next_rounds() const {
  std::vector<std::uint64_t> rounds;
  for (const auto& f : client_->fragments()) rounds.push_back(f.next_round);
  return rounds;
}

std::uint64_t DaemonSync::next_round() const { return sync_round(next_rounds()); }

Status DaemonSync::hand_over_initial() { return client_->send_initial(timeout_ms_); }

Result<protocol::ResultMsg> DaemonSync::wait_result() { return client_->wait_result(timeout_ms_); }

Status DaemonSync::sync(SyncPoint& point) {
  // The replica already lives in the segment (training runs in place).
  const auto fragments = static_cast<std::uint32_t>(client_->fragments().size());
  for (std::uint32_t f = 0; f < fragments; ++f)
    GEOLOCO_TRY(client_->sync(client_->next_round(f), f, point.work_units, point.mean_loss));
  for (std::uint32_t f = 0; f < fragments; ++f) {
    auto result = wait_result();
    if (!result.ok()) return result.status();
    if (result->stop()) point.stop = true;
  }
  ++syncs_;
  return {};
}

Result<std::vector<std::uint32_t>> DaemonSync::hand_out(std::span<const float> replica, std::uint64_t tokens,
                                                        double loss) {
  GEOLOCO_RETURN_IF(!in_flight_.empty(), Err::internal, "fragment ", in_flight_.front(),
                    " is still in flight; it must be merged before the next sync");
  const std::uint64_t round = next_round();
  for (std::uint32_t f : fragments_due(next_rounds())) {
    // The daemon reads the segment; the trainer's own copy keeps training.
    const auto& desc = client_->fragments()[f];
    auto values = replica.subspan(desc.offset, desc.length);
    std::copy(values.begin(), values.end(), client_->fragment_values(f).begin());
    GEOLOCO_TRY(client_->sync(round, f, tokens, loss));
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
    const auto& desc = client_->fragments()[result->fragment];
    merge_fragment(replica.subspan(desc.offset, desc.length), client_->fragment_values(result->fragment), alpha);
    stop = stop || result->stop();
  }
  in_flight_.clear();
  return stop;
}

}  // namespace geoloco::inner
