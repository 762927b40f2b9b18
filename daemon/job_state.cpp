// What one job on this site holds and shows (job_run.h): STATE_SYNC (asking
// for, offering and installing the committed state), checkpoints, and the
// status and round records that `geoloco status` and `watch` print. The
// round engine itself is job_run.cpp and job_round.cpp.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <spdlog/spdlog.h>

#include "common/digest.h"
#include "daemon/job_run.h"
#include "inner/protocol/eval_log.h"
#include "daemon/site_checkpoint.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// -------------------------------------------------------------- STATE_SYNC

namespace {
// "268435552 bytes in 2.15 s (125.0 MB/s)": what a transfer took, for the log.
std::string transfer_summary(std::uint64_t bytes, double seconds) {
  std::ostringstream s;
  s << bytes << " bytes in " << std::fixed << std::setprecision(2) << seconds << " s ("
    << std::setprecision(1) << (seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0) << " MB/s)";
  return s.str();
}
}  // namespace

void JobRun::offer_state(const std::string& peer, const std::string& reason) {
  StateOfferMessage offer;
  offer.job = spec_.name;
  if (!reason.empty()) {
    offer.reason = reason;
    send_now(peer, offer);
    return;
  }
  offer.round = state_.round;
  offer.anchor_digest = digest_hex(state_.anchor_digest());
  offer.layout = state_.layout;
  send_now(peer, sized_offer(std::move(offer), state_.anchor.size()));
  offered_[peer] = state_.round;  // the frames follow the peer's state_accept
}

void JobRun::on_state_accept(const std::string& from, const StateAcceptMessage& accept) {
  auto offered = offered_.find(from);
  if (offered == offered_.end() || offered->second != accept.round) {
    spdlog::info("[{}] {} accepts a state of round {} that this site did not offer it", spec_.name, from, accept.round);
    return;
  }
  offered_.erase(offered);
  if (state_.anchor.empty() || state_.round != accept.round) {
    spdlog::info("[{}] {} accepts the state of round {}, but this site moved on to round {}; it asks again", spec_.name,
                 from, accept.round, state_.round);
    return;
  }
  note(cat("sending the state of round ", state_.round, " to ", from));
  // Sent from the state itself, no copy (docs/design.md §10); a round that commits
  // meanwhile ends the transfer, and the peer asks again.
  const std::span<const float> anchor(state_.anchor), momentum(state_.momentum);
  asio::co_spawn(
      env_.executor,
      [keep = shared_from_this(), from, round = state_.round, anchor, momentum]() -> asio::awaitable<void> {
        auto unchanged = [keep, round, data = anchor.data()] {
          return keep->state_.round == round && keep->state_.anchor.data() == data;
        };
        const auto started = Clock::now();
        auto sent = co_await send_state_frames(*keep->env_.mesh, from, keep->id_, round, anchor, momentum, unchanged);
        if (!sent.ok()) {
          spdlog::warn("[{}] state transfer to {} failed: {}", keep->spec_.name, from, sent.status().message());
          co_return;
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
        keep->note(cat("state of round ", round, " sent to ", from, ": ", transfer_summary(*sent, seconds)));
      },
      asio::detached);
}

void JobRun::receive_state(const std::string& peer, const StateOfferMessage& offer) {
  auto receiver = StateReceiver::start(peer, offer);
  if (!receiver.ok()) {
    machine_->on_state_failed(receiver.status().message());
    return;
  }
  receiving_ = std::move(*receiver);
  send_now(peer, StateAcceptMessage{spec_.name, offer.round});  // now the frames may come, on every connection
}

void JobRun::on_state_frame(const std::string& peer, const transport::FrameHeader& header,
                            std::span<const std::byte> payload) {
  if (!receiving_ || peer != receiving_->peer()) {
    // The rest of a transfer this site no longer wants (an answer to an
    // earlier request, or from another peer): dropped, nothing changes.
    // Not refused: the frame is authentic, and closing the connection would
    // cut the heartbeats that share it.
    spdlog::debug("[{}] state frame {} from {} dropped: no transfer from it in progress", spec_.name, header.chunk,
                  peer);
    return;
  }
  Status added = receiving_->add(peer, header, payload);
  if (added.ok() && receiving_->complete()) added = receiving_->verify();
  if (!added.ok()) {
    // Two transfers from the same peer interleaved, or a broken one: this
    // one is void; the site asks again.
    receiving_.reset();
    machine_->on_state_failed(added.message());
  } else if (receiving_->complete()) {
    machine_->on_state_arrived(HeldState{receiving_->offer().round, receiving_->offer().anchor_digest});
  } else {
    machine_->on_state_progress(Clock::now());
  }
  drive();
}

void JobRun::install_state() {
  if (!receiving_ || !receiving_->complete()) {
    spdlog::error("[{}] internal: no complete state transfer to install", spec_.name);
    return;
  }
  StateReceiver& received = *receiving_;
  const auto& offer = received.offer();
  // The layout: the sender's (the offer checked that it adds up), else the
  // trainer's if it said HELLO, else one flat tensor.
  if (!offer.layout.empty()) state_.layout = offer.layout;
  else if (state_.anchor.empty() || layout_values(state_.layout) != offer.values)
    state_.layout = layout_for(offer.values, host_->snapshot().layout);
  state_.job = spec_.name;
  state_.anchor = std::move(received.anchor());
  state_.momentum = std::move(received.momentum());
  state_.round = offer.round;
  delta_.clear();
  // From this site's request to the state in place: what a (re)joining site waits.
  const double seconds = std::chrono::duration<double>(Clock::now() - state_requested_at_).count();
  note(cat("state of round ", offer.round, " received from ", received.peer(), ": ", offer.values, " parameters, ",
           transfer_summary(received.bytes(), seconds), ", anchor ", offer.anchor_digest));
  if (auto* m = env_.metrics) {
    const Labels job{{"job", spec_.name}};
    (void)m->set("geoloco_state_sync_seconds", job, seconds);
    (void)m->set("geoloco_state_sync_bytes", job, double(received.bytes()));
  }
  if (!feedback_ && compression::uses_error_feedback(spec_.compression))
    feedback_ = std::make_unique<compression::ErrorFeedback>(state_.anchor.size());
  receiving_.reset();
}

// ------------------------------------------------------------- checkpoints

Status JobRun::save_checkpoint() {
  if (state_.job.empty()) state_.job = spec_.name;
  Status saved = save_site_checkpoint(fs::path(dir_) / "checkpoint.safetensors", state_, feedback_.get(), self(),
                                      config_hash_);
  if (saved.ok() && !state_.anchor.empty()) {
    note(cat("checkpoint of round ", state_.round, " saved"));
    if (env_.metrics) (void)env_.metrics->set("geoloco_checkpoint_round", {{"job", spec_.name}}, double(state_.round));
  }
  return saved;
}

Status JobRun::load_checkpoint() {
  const fs::path path = fs::path(dir_) / "checkpoint.safetensors";
  auto loaded = load_site_checkpoint(path, self(), config_hash_, spec_.name);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->set_aside.empty())
    spdlog::error("[{}] the checkpoint {}; the state comes from a peer", spec_.name, loaded->set_aside);
  if (!loaded->loaded) return {};
  state_ = std::move(loaded->loaded->state);
  if (loaded->loaded->residual) feedback_ = std::make_unique<compression::ErrorFeedback>(std::move(*loaded->loaded->residual));
  checkpoint_ = HeldState{state_.round, digest_hex(state_.anchor_digest())};
  note(cat("checkpoint of round ", state_.round, " loaded from ", path.string()));
  return {};
}

// ------------------------------------------------------------------ status

std::map<std::uint64_t, double> JobRun::eval_losses() const {
  return inner::read_eval_log((fs::path(dir_) / "eval.jsonl").string()).loss;
}

nlohmann::json JobRun::status() const {
  JobStatusView v;
  v.name = spec_.name;
  v.state = job_state_;
  v.message = message_;
  v.coordinator = spec_.coordinator;
  v.sites = spec_.sites;
  v.round = state_.round;
  v.stop_rounds = spec_.last_round();
  v.fragments = spec_.fragments();
  v.bytes_sent = bytes_sent_;
  v.bytes_received = bytes_received_;
  v.records = &records_;
  v.eval = inner::read_eval_log((fs::path(dir_) / "eval.jsonl").string());
  if (const fs::path c = fs::path(dir_) / "checkpoint.safetensors"; fs::exists(c)) v.checkpoint = c.string();
  if (!state_.anchor.empty()) v.anchor_digest = digest_hex(state_.anchor_digest());
  if (role_) v.liveness.emplace(role_->live_sites(), role_->lagging());
  v.job_dir = dir_;
  v.where = machine_ ? std::string(ParticipantMachine::where_name(machine_->where())) : std::string("starting");
  return status_json(v);
}

}  // namespace geoloco::daemon
