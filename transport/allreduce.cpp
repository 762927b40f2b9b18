#include "transport/allreduce.h"

#include <algorithm>
#include <atomic>
#include <asio/experimental/as_tuple.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "common/cpu_time.h"
#include "compression/pipeline.h"
#include "common/async_util.h"

namespace geoloco::transport {

namespace {

using asio::use_awaitable;
using asio::experimental::as_tuple;

// The tensor's length: what the output holds, or will hold encoded.
std::uint64_t total_values(const AllReduceRequest& r) {
  return r.encoded_output != nullptr ? r.encoded_output->values : r.output.size();
}

Status validate(const Mesh& mesh, const AllReduceRequest& r) {
  GEOLOCO_RETURN_IF(r.participants.empty(), Err::invalid_argument, "all-reduce: no participants");
  GEOLOCO_RETURN_IF(r.weights.size() != r.participants.size(), Err::invalid_argument, "all-reduce: ", r.weights.size(),
                    " weights for ", r.participants.size(), " participants");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < r.participants.size(); ++i) {
    GEOLOCO_RETURN_IF(!seen.insert(r.participants[i]).second, Err::invalid_argument, "all-reduce: participant '",
                      r.participants[i], "' listed twice");
    GEOLOCO_RETURN_IF(!(r.weights[i] > 0) || !std::isfinite(r.weights[i]), Err::invalid_argument,
                      "all-reduce: weight of '", r.participants[i], "' must be finite and > 0, got ", r.weights[i]);
  }
  bool observer = false;
  for (const auto& o : r.observers) {
    GEOLOCO_RETURN_IF(!seen.insert(o).second, Err::invalid_argument, "all-reduce: '", o,
                      "' is listed twice among participants and observers");
    observer |= o == mesh.site();
  }
  GEOLOCO_RETURN_IF(!seen.count(mesh.site()), Err::invalid_argument, "all-reduce: this site (", mesh.site(),
                    ") is not among the participants");
  GEOLOCO_RETURN_IF(r.encoded_output != nullptr && !r.output.empty(), Err::invalid_argument,
                    "all-reduce: give output or encoded_output, not both");
  const std::uint64_t n = total_values(r);
  GEOLOCO_RETURN_IF(!(observer && r.input.empty()) && r.input.size() != n, Err::invalid_argument,
                    "all-reduce: input has ", r.input.size(), " values, output ", n);
  GEOLOCO_RETURN_IF(!r.input_base.empty() && r.input_base.size() != r.input.size(), Err::invalid_argument,
                    "all-reduce: input_base has ", r.input_base.size(), " values, input ", r.input.size());
  if (r.feedback != nullptr)
    GEOLOCO_RETURN_IF(r.feedback_offset > r.feedback->residual().size() ||
                          r.feedback->residual().size() - r.feedback_offset < r.input.size(),
                      Err::invalid_argument, "all-reduce: error feedback holds ", r.feedback->residual().size(),
                      " values, too few for input ", r.input.size(), " at offset ", r.feedback_offset);
  return compression::validate(r.pipeline);
}

using diloco::chunk_range;
using diloco::chunks_in;

// The seed of one encode (diloco/exchange.h: the simulator seeds its encodes so too).
std::uint64_t encode_seed(const AllReduceRequest& r, std::size_t site, std::size_t shard, std::uint64_t c, int phase) {
  return diloco::encode_seed(r.seed, r.key.round, r.key.attempt, site, shard, c, phase);
}

// This site's contribution to chunk `range`: input, or input_base − input
// made in `scratch` (one chunk at a time).
std::span<const float> contribution(const AllReduceRequest& r, Range range, std::vector<float>& scratch) {
  return diloco::contribution(r.input, r.input_base, range, scratch);
}

class AllReduceOp final : public FrameSink, public std::enable_shared_from_this<AllReduceOp> {
 public:
  AllReduceOp(Mesh& mesh, AllReduceRequest request, compression::Pipeline pipeline)
      : mesh_(mesh), r_(std::move(request)), pipeline_(std::move(pipeline)), done_(mesh.executor()) {
    n_parts_ = r_.participants.size();
    me_ = n_parts_;  // an observer owns no shard
    for (std::size_t i = 0; i < n_parts_; ++i) {
      index_[r_.participants[i]] = i;
      if (r_.participants[i] == mesh.site()) me_ = i;
    }
    observer_ = me_ == n_parts_;
    for (const auto& o : r_.observers) observer_names_.insert(o);
    chunk_ = mesh.options().transport.chunk_elements;
    conns_ = mesh.options().transport.connections_per_peer;
    total_ = total_values(r_);
    normalized_ = diloco::normalized_weights(r_.weights);
    gathered_.resize(n_parts_);
    for (std::size_t j = 0; j < n_parts_; ++j) {
      first_chunk_.push_back(gathers_expected_);
      gathered_[j].assign(chunks_of(j), false);
      gathers_expected_ += chunks_of(j);
    }
    if (auto* e = r_.encoded_output) {
      e->clear();
      e->pipeline = r_.pipeline;
      e->chunks.resize(gathers_expected_);
      for (std::size_t j = 0; j < n_parts_; ++j)
        for (std::uint64_t c = 0; c < chunks_of(j); ++c) {
          e->ranges.push_back(chunk_range(shard_range(total_, n_parts_, j), c));
          e->sources.push_back(r_.participants[j]);
        }
    }
    if (!observer_) contributions_.resize(chunks_of(me_));
  }

  asio::awaitable<Result<AllReduceStats>> run() {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    auto self = shared_from_this();
    auto ex = mesh_.executor();
    mesh_.begin(r_.key, this);
    for (std::size_t j = 0; j < n_parts_ && !observer_; ++j) {
      if (j == me_) {
        ++tasks_;
        asio::co_spawn(ex, contribute_own(self), asio::detached);
        continue;
      }
      for (int k = 0; k < conns_; ++k) {
        ++tasks_;
        asio::co_spawn(ex, send_shard(self, j, k), asio::detached);
      }
    }
    std::optional<asio::steady_timer> deadline;
    if (r_.timeout.count() > 0) {
      deadline.emplace(ex, r_.timeout);
      deadline->async_wait([self](std::error_code ec) {
        if (!ec)
          self->fail(GEOLOCO_ERROR(Err::timeout, "all-reduce of round ", self->r_.key.round, " attempt ",
                                   self->r_.key.attempt, " did not finish within ", self->r_.timeout.count(), " ms"));
      });
    }
    check_done();
    while (!finished_) co_await done_.wait();
    if (deadline) deadline->cancel();
    mesh_.end(r_.key);
    if (!status_.ok()) co_return status_;
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats_.cpu_seconds = process_cpu_seconds() - cpu_start;
    co_return stats_;
  }

  Status admit(const std::string& peer, const FrameHeader& h) override {
    auto it = index_.find(peer);
    GEOLOCO_RETURN_IF(it == index_.end(), Err::invalid_argument, frame_type_name(h.type), " frame from ", peer,
                      ", which is not a participant of round ", h.round);
    GEOLOCO_RETURN_IF(h.type == FrameType::shard && observer_, Err::malformed, "shard chunk from ", peer,
                      ", but this site only observes round ", h.round);
    const std::size_t from = it->second;
    if (h.type == FrameType::shard) {
      GEOLOCO_RETURN_IF(h.chunk >= contributions_.size(), Err::malformed, "shard chunk ", h.chunk, " from ", peer,
                        ": this site's shard has ", contributions_.size(), " chunks");
      GEOLOCO_RETURN_IF(contributions_[h.chunk].count(from), Err::malformed, "duplicate shard chunk ", h.chunk,
                        " from ", peer);
      return {};
    }
    if (h.type == FrameType::gather) {
      GEOLOCO_RETURN_IF(h.chunk >= gathered_[from].size(), Err::malformed, "gather chunk ", h.chunk, " from ", peer,
                        ": its shard has ", gathered_[from].size(), " chunks");
      GEOLOCO_RETURN_IF(gathered_[from][h.chunk], Err::malformed, "duplicate gather chunk ", h.chunk, " from ", peer);
      return {};
    }
    return GEOLOCO_ERROR(Err::malformed, frame_type_name(h.type), " frame from ", peer, " during an all-reduce");
  }

  Status deliver(const std::string& peer, const FrameHeader& h, Buffer payload) override {
    if (finished_) return {};
    const std::size_t from = index_.at(peer);
    stats_.bytes_received += kFrameHeaderSize + payload.size();
    if (h.type == FrameType::shard) {
      contributions_[h.chunk][from] = std::move(payload);
      return reduce_if_complete(h.chunk);
    }
    // Gather: the owner's averaged chunk; decode straight into the output,
    // or check its header and keep its bytes.
    const Range c = chunk_range(shard_range(total_, n_parts_, from), h.chunk);
    Status s = decode_gathered(payload, c);
    if (s.ok() && r_.encoded_output != nullptr)
      r_.encoded_output->chunks[first_chunk_[from] + h.chunk] = std::move(payload);
    else mesh_.pool().release(std::move(payload));
    if (!s.ok()) return GEOLOCO_ERROR(s.code(), "gather chunk ", h.chunk, " from ", peer, ": ", s.message());
    gathered_[from][h.chunk] = true;
    ++gathers_received_;
    check_done();
    return {};
  }

  void cancel(const Status& why) override { fail(why); }

  void peer_lost(const std::string& peer, const Status& reason) override {
    // Observers receive best effort: only a lost participant fails the operation.
    if (index_.count(peer)) fail(GEOLOCO_ERROR(reason.code(), "peer ", peer, ": ", reason.message()));
  }

 private:
  std::uint64_t chunks_of(std::size_t j) const { return chunks_in(shard_range(total_, n_parts_, j), chunk_); }

  // Decodes an averaged chunk into the output, or (encoded output) checks
  // its header only: the caller's passes over the chunks decode it, and
  // a decode here would be one more pass over the model.
  Status decode_gathered(std::span<const std::byte> payload, Range c) {
    ThreadCpuTimer timer(stats_.reduce_cpu_seconds);
    if (r_.encoded_output != nullptr) return pipeline_.check_header(payload, c.size);
    stats_.gathered_values_decoded += c.size;
    return pipeline_.decode(payload, r_.output.subspan(c.begin, c.size));
  }
  Range chunk_range(Range shard, std::uint64_t c) const { return diloco::chunk_range(shard, c, chunk_); }
  std::uint64_t seed(std::size_t site, std::size_t shard, std::uint64_t c, int phase) const {
    return encode_seed(r_, site, shard, c, phase);
  }

  // Encodes chunk c of shard j of this site's input, through error feedback
  // (which keeps what the encode dropped; geolocod zeroes the round's range
  // of it when the round is not kept).
  Result<Buffer> encode_contribution(std::size_t j, std::uint64_t c) {
    ThreadCpuTimer timer(stats_.encode_cpu_seconds);
    const Range range = chunk_range(shard_range(r_.input.size(), n_parts_, j), c);
    stats_.values_encoded += range.size;
    Buffer out = mesh_.pool().acquire(pipeline_.max_encoded_size(range.size));
    const auto values = contribution(r_, range, difference_);
    const std::uint64_t s = seed(me_, j, c, 1);
    const std::size_t at = r_.feedback_offset + range.begin;
    auto size = !r_.feedback ? pipeline_.encode(values, out, s) : r_.feedback->encode(pipeline_, at, values, out, s);
    if (!size.ok()) {
      mesh_.pool().release(std::move(out));
      return size.status();
    }
    out.resize(*size);
    return out;
  }

  static asio::awaitable<void> contribute_own(std::shared_ptr<AllReduceOp> self) {
    for (std::uint64_t c = 0; c < self->contributions_.size() && !self->finished_; ++c) {
      auto payload = self->encode_contribution(self->me_, c);
      if (!payload.ok()) {
        self->fail(payload.status());
        break;
      }
      self->contributions_[c][self->me_] = std::move(*payload);
      if (Status s = self->reduce_if_complete(c); !s.ok()) {
        self->fail(s);
        break;
      }
      co_await asio::post(self->mesh_.executor(), use_awaitable);  // let the network make progress
    }
    self->task_done();
  }

  // Slot k's connection to `peer`; one that is being dialed again (a link
  // that just flapped, a stale frame refused) is waited for up to the
  // connect timeout, so the attempt does not fail at once and get planned
  // again at once.
  static asio::awaitable<std::shared_ptr<Connection>> connection_to(std::shared_ptr<AllReduceOp> self,
                                                                    const std::string& peer, int k) {
    auto conn = self->mesh_.connection(peer, k);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(self->mesh_.options().transport.connect_timeout_ms);
    asio::steady_timer pause(self->mesh_.executor());
    while (!conn && !self->finished_ && std::chrono::steady_clock::now() < until) {
      pause.expires_after(std::chrono::milliseconds(20));
      co_await pause.async_wait(as_tuple(use_awaitable));
      conn = self->mesh_.connection(peer, k);
    }
    co_return conn;
  }

  static asio::awaitable<void> send_shard(std::shared_ptr<AllReduceOp> self, std::size_t j, int k) {
    const std::string& peer = self->r_.participants[j];
    auto conn = co_await connection_to(self, peer, k);
    for (std::uint64_t c = k; c < self->chunks_of(j) && !self->finished_; c += self->conns_) {
      // The slot's connection may have been replaced (a TLS reload) since the last chunk.
      if (auto now = self->mesh_.connection(peer, k)) conn = std::move(now);
      if (!conn) {
        self->fail(GEOLOCO_ERROR(Err::io, "peer ", peer, ": not connected (slot ", k, ")"));
        break;
      }
      auto payload = self->encode_contribution(j, c);
      if (!payload.ok()) {
        self->fail(payload.status());
        break;
      }
      Status s = co_await self->send(*conn, FrameType::shard, c, *payload);
      self->mesh_.pool().release(std::move(*payload));
      if (!s.ok()) {
        self->fail(GEOLOCO_ERROR(s.code(), "peer ", peer, ": ", s.message()));
        break;
      }
    }
    self->task_done();
  }

  static asio::awaitable<void> send_gather(std::shared_ptr<AllReduceOp> self, std::string peer, std::uint64_t c,
                                           std::shared_ptr<const Buffer> payload) {
    // An observer that is not connected is not waited for: it catches up later.
    const int slot = static_cast<int>(c % self->conns_);
    std::shared_ptr<Connection> conn = self->mesh_.connection(peer, slot);
    if (!self->observer_names_.count(peer)) conn = co_await connection_to(self, peer, slot);  // (no co_await in ?:)
    if (!self->finished_) {
      // No co_await inside ?: — GCC 12 miscompiles it.
      Status s = GEOLOCO_ERROR(Err::io, "not connected");
      if (conn) s = co_await self->send(*conn, FrameType::gather, c, *payload);
      // An observer that cannot be reached catches up later (state sync);
      // it must not stop the participants.
      if (!s.ok() && !self->observer_names_.count(peer))
        self->fail(GEOLOCO_ERROR(s.code(), "peer ", peer, ": ", s.message()));
    }
    self->task_done();
  }

  asio::awaitable<Status> send(Connection& conn, FrameType type, std::uint64_t c, std::span<const std::byte> payload) {
    FrameHeader h;
    h.type = type;
    h.job = mesh_.options().job;
    h.round = r_.key.round;
    h.attempt = r_.key.attempt;
    h.chunk = static_cast<std::uint32_t>(c);
    stats_.bytes_sent += kFrameHeaderSize + payload.size();
    co_return co_await conn.write_frame(h, payload);
  }

  // When all contributions to chunk c of this site's shard are in: decode
  // them in participant order, sum with normalized weights, encode the
  // average once, decode it here and send the same bytes to every peer.
  Status reduce_if_complete(std::uint64_t c) {
    auto& parts = contributions_[c];
    if (parts.size() < n_parts_ || finished_) return {};
    const double cpu_start = thread_cpu_seconds();  // decode_gathered() below counts itself
    const Range range = chunk_range(shard_range(total_, n_parts_, me_), c);
    sum_.assign(range.size, 0.0f);
    for (std::size_t s = 0; s < n_parts_; ++s) {
      // Decoded and added in one pass where the chain allows (raw fp32): the
      // bits of decode() then diloco::add_weighted().
      Status st = pipeline_.decode_add(parts[s], sum_, normalized_[s]);
      if (!st.ok())
        return GEOLOCO_ERROR(st.code(), "shard chunk ", c, " from ", r_.participants[s], ": ", st.message());
    }
    for (auto& [site, bytes] : parts) mesh_.pool().release(std::move(bytes));
    parts.clear();
    // The averaged chunk goes back to the pool once the last peer has it.
    BufferPool* pool = &mesh_.pool();
    auto payload =
        std::shared_ptr<Buffer>(new Buffer(pool->acquire(pipeline_.max_encoded_size(range.size))), [pool](Buffer* b) {
          pool->release(std::move(*b));
          delete b;
        });
    auto size = pipeline_.encode(sum_, *payload, seed(me_, me_, c, 2));
    stats_.reduce_cpu_seconds += thread_cpu_seconds() - cpu_start;
    if (!size.ok()) return size.status();
    payload->resize(*size);
    Status own = decode_gathered(*payload, range);
    if (!own.ok()) return own;
    if (r_.encoded_output != nullptr)
      r_.encoded_output->chunks[first_chunk_[me_] + c] = Buffer(payload->begin(), payload->end());
    gathered_[me_][c] = true;
    ++gathers_received_;
    auto self = shared_from_this();
    for (std::size_t j = 0; j < n_parts_; ++j) {
      if (j == me_) continue;
      ++tasks_;
      asio::co_spawn(mesh_.executor(), send_gather(self, r_.participants[j], c, payload), asio::detached);
    }
    for (const auto& o : r_.observers) {
      ++tasks_;
      asio::co_spawn(mesh_.executor(), send_gather(self, o, c, payload), asio::detached);
    }
    check_done();
    return {};
  }

  void task_done() {
    --tasks_;
    check_done();
  }

  void check_done() {
    if (!finished_ && tasks_ == 0 && gathers_received_ == gathers_expected_) {
      finished_ = true;
      done_.notify_all();
    }
  }

  void fail(Status s) {
    if (finished_) return;
    finished_ = true;
    status_ = std::move(s);
    done_.notify_all();
  }

  Mesh& mesh_;
  AllReduceRequest r_;
  compression::Pipeline pipeline_;
  Signal done_;
  std::size_t n_parts_ = 0;
  std::size_t me_ = 0;
  std::uint64_t chunk_ = 0;
  std::uint64_t total_ = 0;                 // the tensor's length
  std::vector<std::uint64_t> first_chunk_;  // per shard: the index of its first chunk among all
  std::vector<float> difference_;           // one chunk of input_base − input
  int conns_ = 1;
  std::map<std::string, std::size_t> index_;
  bool observer_ = false;
  std::set<std::string> observer_names_;
  std::vector<float> normalized_;
  std::vector<std::map<std::size_t, Buffer>> contributions_;  // per chunk of my shard
  std::vector<std::vector<bool>> gathered_;                   // per shard, per chunk
  std::uint64_t gathers_expected_ = 0;
  std::uint64_t gathers_received_ = 0;
  std::vector<float> sum_;
  int tasks_ = 0;
  bool finished_ = false;
  Status status_;
  AllReduceStats stats_;
};

}  // namespace

std::uint64_t EncodedOutput::bytes() const {
  std::uint64_t total = 0;
  for (const auto& c : chunks) total += c.size();
  return total;
}

diloco::ChunkList EncodedOutput::chunk_list() const {
  diloco::ChunkList list;
  list.ranges = ranges;
  list.decoder = [this]() -> diloco::ChunkDecoder {
    auto made = compression::Pipeline::create(pipeline);
    if (!made.ok()) return [status = made.status()](std::size_t, std::span<float>) { return status; };
    return [this, codec = std::make_shared<compression::Pipeline>(std::move(*made))](std::size_t i,
                                                                                     std::span<float> out) -> Status {
      GEOLOCO_RETURN_IF(i >= chunks.size() || out.size() != ranges[i].size, Err::internal, "encoded output: chunk ", i,
                        " of ", chunks.size(), " decoded into ", out.size(), " values");
      if (Status s = codec->decode(chunks[i], out); !s.ok())
        return GEOLOCO_ERROR(s.code(), "encoded output, chunk ", i,
                             i < sources.size() ? cat(" (averaged by ", sources[i], ")") : std::string(), ": ",
                             s.message());
      std::atomic_ref<std::uint64_t>(values_decoded).fetch_add(out.size());
      return Status();
    };
  };
  return list;
}

Status EncodedOutput::for_each(const std::function<Status(std::uint64_t, std::span<const float>)>& fn) const {
  GEOLOCO_RETURN_IF(ranges.size() != chunks.size(), Err::internal, "encoded output: ", ranges.size(), " ranges for ",
                    chunks.size(), " chunks");
  return diloco::run_chunk_pass(
      chunk_list(), 1, {},
      [&](std::size_t, std::uint64_t begin, std::span<const float> values) { return fn(begin, values); });
}

void EncodedOutput::clear() {
  values_decoded = 0;
  ranges = std::vector<Range>();
  chunks = std::vector<Buffer>();
  sources = std::vector<std::string>();
}

asio::awaitable<Result<AllReduceStats>> all_reduce(Mesh& mesh, AllReduceRequest request) {
  if (Status s = validate(mesh, request); !s.ok()) co_return s;
  auto pipeline = compression::Pipeline::create(request.pipeline);
  if (!pipeline.ok()) co_return pipeline.status();
  auto op = std::make_shared<AllReduceOp>(mesh, std::move(request), std::move(*pipeline));
  co_return co_await op->run();
}

}  // namespace geoloco::transport
