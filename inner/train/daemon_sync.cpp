#include "inner/train/daemon_sync.h"

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

Status DaemonSync::hand_over_initial() { return client_->send_initial(timeout_ms_); }

Status DaemonSync::sync(SyncPoint& point) {
  // The replica already lives in the segment (training runs in place).
  const auto fragments = static_cast<std::uint32_t>(client_->fragments().size());
  for (std::uint32_t f = 0; f < fragments; ++f)
    GEOLOCO_TRY(client_->sync(client_->next_round(f), f, point.work_units, point.mean_loss));
  for (std::uint32_t f = 0; f < fragments; ++f) {
    auto result = client_->wait_result(timeout_ms_);
    if (!result.ok()) return result.status();
    if (result->stop()) point.stop = true;
  }
  ++syncs_;
  return {};
}

}  // namespace geoloco::inner
