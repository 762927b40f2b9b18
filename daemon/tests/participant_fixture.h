// What the participant machine's tests share: a fixed clock, options, the
// messages they feed in, and readers of the actions a step orders.
#pragma once

#include <catch2/catch.hpp>

#include "common/overload.h"
#include "daemon/participant_machine.h"

namespace geoloco::daemon::participant_test {

using namespace geoloco::daemon::participant;
using namespace std::chrono_literals;
using Where = ParticipantMachine::Where;

inline const Clock::time_point t0{std::chrono::hours(3)};
inline const std::string kDigest1 = "1111111111111111", kDigest2 = "2222222222222222", kDigest3 = "3333333333333333";

// (Initialized, not assigned: GCC 12's -Wrestrict misfires on assigning short literals.)
inline ParticipantOptions options(const std::string& self = "b") {
  return ParticipantOptions{.job = "j",
                            .self = self,
                            .coordinator = "a",
                            .sites = {"a", "b", "c"},
                            .fragments = 1,
                            .straggler = {},
                            .inner_steps = 20,
                            .ready_resend_ms = 300ms,
                            .state_retry_ms = 1s,
                            .state_stall_ms = 2s};
}

// One word per action, in order: what a reader of a log would call it.
inline std::string kind(const ParticipantAction& a) {
  return std::visit(
      Overload{[](const Send& s) { return cat("send ", control_type_name(s.message), " to ", s.to); },
               [](const StartExchange& e) { return std::string(e.participant ? "exchange" : "observe"); },
               [](const DeclineExchange& d) { return cat("decline ", d.round, ".", d.attempt); },
               [](const CancelExchange& c) { return cat("cancel ", c.round, ".", c.attempt); },
               [](const ForgetExchange&) { return std::string("forget"); },
               [](const MoveTrainer& m) { return cat("move trainer ", m.round); },
               [](const ApplyRound&) { return std::string("apply"); },
               [](const ApplyLoggedRound& a) {
                 return cat("apply ", a.committed.round, ".", a.attempt, " from the round log");
               },
               [](const KeepTrainerAnchor&) { return std::string("keep anchor"); },
               [](const ReleaseTrainer& r) { return cat("release ", r.next_round, r.stop ? " stop" : ""); },
               [](const Record& r) {
                 if (const auto* d = std::get_if<history::Dropped>(&r.event)) return cat("drop ", d->tokens);
                 const auto& a = std::get<history::Aborted>(r.event);
                 return cat("aborted ", a.round, ".", a.attempt);
               },
               [](const WelcomeTrainer& w) { return cat("welcome ", w.round); },
               [](const PublishInitial&) { return std::string("publish initial"); },
               [](const InstallState&) { return std::string("install"); },
               [](const ReceiveState& r) {
                 return cat("receive from ", r.peer, r.holders > 1 ? cat(" (1/", r.holders, ")") : std::string());
               },
               [](const DropTransfer&) { return std::string("drop transfer"); },
               [](const ReleaseDonor& r) { return (r.hand_out ? "release " : "drop ") + r.peer; },
               [](const OfferState& o) {
                 return o.reason.empty() ? cat("offer to ", o.peer) : cat("offer to ", o.peer, ": ", o.reason);
               },
               [](const SaveCheckpoint&) { return std::string("checkpoint"); },
               [](const JournalCommit& j) { return cat("journal and send commit to ", j.to); },
               [](const EndJob& e) {
                 const char* how[] = {"finished", "stopped", "cancelled", "failed"};
                 return cat("end ", how[static_cast<int>(e.end)], e.checkpoint ? " with checkpoint" : "");
               }},
      a);
}

// The actions but ForgetExchange (freeing the round's Δ), which the tests
// that care about it count with forgets().
inline std::vector<std::string> kinds(const ParticipantMachine::Actions& a) {
  std::vector<std::string> out;
  for (const auto& x : a.actions)
    if (!std::holds_alternative<ForgetExchange>(x)) out.push_back(kind(x));
  return out;
}

inline int forgets(const ParticipantMachine::Actions& a) {
  int n = 0;
  for (const auto& x : a.actions) n += std::holds_alternative<ForgetExchange>(x);
  return n;
}

// The first history record of type T the machine asked for.
template <class T>
inline const T& recorded(const ParticipantMachine::Actions& a) {
  for (const auto& x : a.actions)
    if (const Record* r = std::get_if<Record>(&x))
      if (const T* t = std::get_if<T>(&r->event)) return *t;
  FAIL("no such record");
  throw 0;
}

template <class T>
inline const T& first(const ParticipantMachine::Actions& a) {
  for (const auto& x : a.actions)
    if (const T* t = std::get_if<T>(&x)) return *t;
  FAIL("no such action");
  throw 0;
}

// The first message of type M sent (a COMMIT, also as the one a
// JournalCommit sends once its record is on disk).
template <class M>
inline const M& sent(const ParticipantMachine::Actions& a) {
  for (const auto& x : a.actions) {
    if (const Send* s = std::get_if<Send>(&x))
      if (const M* m = std::get_if<M>(&s->message)) return *m;
    if constexpr (std::is_same_v<M, CommitMessage>)
      if (const JournalCommit* j = std::get_if<JournalCommit>(&x)) return j->commit;
  }
  FAIL("no such message sent");
  throw 0;
}

inline bool noted(const ParticipantMachine::Actions& a, const std::string& part) {
  for (const auto& n : a.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

// A plan counting each participant's phase of 640 tokens trained for
// `anchor_round` (0: `round`, on time), as the tests' phases are.
inline PlanMessage plan(std::uint64_t round, std::vector<std::string> participants, std::vector<std::string> late = {},
                        std::uint64_t attempt = 0, std::uint64_t anchor_round = 0) {
  PlanMessage p;
  p.round = round;
  p.participants = std::move(participants);
  p.weights.assign(p.participants.size(), 1.0);
  p.tokens_each.assign(p.participants.size(), 640);
  p.anchor_rounds.assign(p.participants.size(), anchor_round == 0 ? round : anchor_round);
  p.late = std::move(late);
  p.attempt = attempt;
  return p;
}

// `p` with `site`'s phase counted as `tokens` trained for `anchor_round`.
inline PlanMessage counting(PlanMessage p, const std::string& site, std::uint64_t tokens, std::uint64_t anchor_round) {
  for (std::size_t i = 0; i < p.participants.size(); ++i)
    if (p.participants[i] == site) {
      p.tokens_each[i] = tokens;
      p.anchor_rounds[i] = anchor_round;
    }
  return p;
}

inline StateOfferMessage offer(std::uint64_t round, const std::string& digest) {
  return StateOfferMessage{"j", round, digest, 10, 1 << 20, "", {}};
}

// Site b after catching up to the state of `round`: idle, its trainer
// welcomed at round + 1.
inline ParticipantMachine joined(std::uint64_t round = 0, ParticipantOptions o = options()) {
  ParticipantMachine m(o, std::nullopt, std::nullopt, 0, t0);
  m.on_state_offer("a", offer(round, kDigest1), t0);
  m.on_state_arrived({round, kDigest1});
  (void)m.step(t0);
  REQUIRE(m.where() == Where::idle);
  REQUIRE(m.trainer_round() == round + 1);
  return m;
}

// Site b with round `round`'s phase READY, exchanged and committing `digest`.
inline void to_committing(ParticipantMachine& m, std::uint64_t round, const std::string& digest) {
  m.on_phase({round, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(round, {"a", "b", "c"})).ok());
  m.on_exchange_done(round, 0, digest);
  (void)m.step(t0);
  REQUIRE(m.where() == Where::committing);
}

}  // namespace geoloco::daemon::participant_test
