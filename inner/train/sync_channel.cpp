#include "inner/train/sync_channel.h"

#include "inner/protocol/client.h"

namespace geoloco::inner {

namespace {

// protocol::Client as a SyncChannel.
class SocketChannel final : public SyncChannel {
 public:
  explicit SocketChannel(std::unique_ptr<protocol::Client> client) : client_(std::move(client)) {}
  bool anchor_ready() const override { return client_->anchor_ready(); }
  std::span<float> parameters() override { return client_->parameters(); }
  std::span<float> fragment_values(std::uint32_t f) override { return client_->fragment_values(f); }
  const std::vector<protocol::FragmentDesc>& fragments() const override { return client_->fragments(); }
  Status send_initial(int timeout_ms) override { return client_->send_initial(timeout_ms); }
  Status sync(const protocol::SyncMsg& m) override {
    return client_->sync(m.round, m.fragment, m.tokens, m.loss, m.timing);
  }
  Result<protocol::ResultMsg> wait_result(int timeout_ms) override { return client_->wait_result(timeout_ms); }

 private:
  std::unique_ptr<protocol::Client> client_;
};

}  // namespace

ChannelFactory socket_channel(std::string socket_path, std::string job, int timeout_ms) {
  return [socket_path, job, timeout_ms](const Layout& layout) -> Result<std::unique_ptr<SyncChannel>> {
    protocol::ClientOptions options;
    options.connect_timeout_ms = timeout_ms;
    auto client = protocol::Client::connect(socket_path, job, layout, options);
    if (!client.ok()) return client.status();
    return std::unique_ptr<SyncChannel>(new SocketChannel(std::move(*client)));
  };
}

}  // namespace geoloco::inner
