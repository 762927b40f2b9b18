// JobRun's messages: control messages sent (queued or at once, the local
// ones posted) and received from the mesh, routed to the succession, the
// coordinator's office or the participant machine; a link lost or back.
#include <asio/post.hpp>
#include <spdlog/spdlog.h>

#include "common/overload.h"
#include "daemon/job_run.h"

namespace geoloco::daemon {

using Clock = std::chrono::steady_clock;

void JobRun::send(const std::string& site, const ControlMessage& message) {
  if (site.empty()) return;  // for the coordinator while an election is open: nobody to send to yet
  // With GEOLOCO_LOG_LEVEL=debug, each message as it is handed on (the
  // order of journal writes and sends can then be read from the log).
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("[{}] {}{} to {}", spec_.name, control_type_name(message),
                  std::visit(
                      [](const auto& m) -> std::string {
                        if constexpr (requires { m.round; }) return cat(" of round ", m.round);
                        else return std::string();
                      },
                      message),
                  site);
  if (site == self()) {
    // Local delivery, after the current handler returns (no re-entrance).
    asio::post(env_.executor, [self = shared_from_this(), message] { self->deliver(self->self(), message); });
    return;
  }
  // A PLAN also goes at once, beside the queue: a peer that was down has a
  // backlog of retried messages, and a PLAN behind it would reach the peer
  // after the exchange's first data frames on the same connection, where the
  // peer's reader waits for the operation it has not been told of
  // (transport/mesh.h). The queued copy that follows is a repeat, ignored.
  if (std::holds_alternative<PlanMessage>(message))
    outbox_->send_now(site, control_header(), encode_control(message), false);
  outbox_->send(site, control_header(), encode_control(message));
}

void JobRun::send_now(const std::string& site, const ControlMessage& message) {
  outbox_->send_now(site, control_header(), encode_control(message));
}

transport::FrameHeader JobRun::control_header() const {
  transport::FrameHeader h;
  h.type = transport::FrameType::control;
  h.job = id_;
  h.round = state_.round;
  return h;
}

Status JobRun::on_frame(const std::string& peer, const transport::FrameHeader& header,
                        std::span<const std::byte> payload) {
  if (header.type == transport::FrameType::state) {
    on_state_frame(peer, header, payload);
    return {};
  }
  auto message = decode_control(std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
  if (!message.ok()) return message.status();
  deliver(peer, *message);
  return {};
}

void JobRun::on_link_lost(const std::string& peer, const Status& why) {
  if (!machine_ || done()) return;
  if (std::find(spec_.sites.begin(), spec_.sites.end(), peer) == spec_.sites.end()) return;
  if (role_) role_->on_lost(peer, why.message());
  if (succession_) succession_->on_lost(peer, Clock::now());
  drive();
}

void JobRun::on_link_up(const std::string& peer) {
  if (outbox_) outbox_->link_up(peer);
}

void JobRun::deliver(const std::string& from, const ControlMessage& message) {
  if (!machine_) return;
  const auto now = Clock::now();
  if (const auto* h = std::get_if<HeartbeatMessage>(&message); h && !done()) {
    succession_->on_heartbeat(from, *h, now);
    step_succession();
  }
  if (const auto* e = std::get_if<ElectMessage>(&message)) {
    if (done())
      send(from, VoteMessage{succession_->epoch(),
                             e->pre,
                             false,
                             cat("the job has ended on ", self(), " (", job_state_name(job_state_), ")"),
                             coordinator(),
                             {}});
    else succession_->on_elect(from, *e, standing(), now);
    drive();
    return;
  }
  if (const auto* v = std::get_if<VoteMessage>(&message)) {
    if (!done()) succession_->on_vote(from, *v, now);
    drive();
    return;
  }
  if (const auto* q = std::get_if<RoundQueryMessage>(&message)) {
    answer_round_query(from, *q);
    return;
  }
  if (const auto* o = std::get_if<RoundOutcomeMessage>(&message)) {
    machine_->on_round_outcome(from, *o);
    drive();
    return;
  }
  if (for_coordinator(message)) {
    if (role_ && (!done() || for_coordinator_after_end(message))) role_->on_message(from, message);
    return;
  }
  if (!admit(from, message)) {
    drive();
    return;
  }
  if (const auto* c = std::get_if<CommittedMessage>(&message)) {
    // What this site knows committed, on disk before anything depends on
    // it: a successor this site votes for must hear of the round even if
    // this site never applies it (it may catch up past it).
    journal_committed(
        CommittedRecord{c->round, c->anchor_digest, c->tokens, c->final, c->attempt, c->epoch, "announced"});
  }
  ParticipantMachine& m = *machine_;
  Status s = std::visit(
      Overload{[&](const PlanMessage& p) { return m.on_plan(from, p); },
               [&](const CommittedMessage& c) { return m.on_committed(from, c); },
               [&](const AbortMessage& a) { return m.on_abort(from, a); },
               [&](const StateRequestMessage& r) {
                 m.on_state_request(from, r);
                 return Status();
               },
               [&](const StateOfferMessage& o) {
                 if (o.reason.empty() && !state_.anchor.empty() && o.values != state_.anchor.size())
                   return Status(Err::invalid_argument, cat("a state offer of ", o.values,
                                                            " values, this site's model has ", state_.anchor.size()));
                 m.on_state_offer(from, o, now);
                 return Status();
               },
               [&](const StateAcceptMessage& a) {
                 on_state_accept(from, a);
                 return Status();
               },
               [&](const auto& other) {
                 return Status(Err::invalid_argument,
                               cat(control_type_name(ControlMessage(other)), " is not for a site's rounds"));
               }},
      message);
  if (!s.ok()) spdlog::warn("[{}] refused a message from {}: {}", spec_.name, from, s.message());
  drive();
}

}  // namespace geoloco::daemon
