// What one job on this site holds and shows (job_run.h): STATE_SYNC (asking
// for, offering and installing the committed state), checkpoints, and the
// status and round records that `geoloco status` and `watch` print. The
// round engine itself is job_run.cpp and job_round.cpp.
#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <utility>

#include "common/digest.h"
#include "daemon/job_run.h"
#include "inner/protocol/eval_log.h"
#include "daemon/round_replay.h"
#include "daemon/site_checkpoint.h"
#include "daemon/site_metrics.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// -------------------------------------------------------------- STATE_SYNC
// What is offered, accepted and received is StateTransfers' (state_transfers.h);
// here it meets the machine, the log and the metrics.

Result<std::shared_ptr<const StateSource>> JobRun::state_source(const std::optional<HeldState>& asker) {
  GEOLOCO_RETURN_IF(state_.anchor.empty() || !journal_, Err::mismatch, "no committed state yet");
  const JournalSummary journal = summarize_journal(journal_->records());
  RoundAt held{state_.round, {}};
  if (auto c = journal.commits.find(state_.round); c != journal.commits.end()) held.digest = c->second.digest;
  else held.digest = digest_hex(state_.anchor_digest());
  const fs::path checkpoint_path = fs::path(dir_) / "checkpoint.safetensors";
  if (!mapped_checkpoint_ && fs::exists(checkpoint_path)) {
    auto mapped = MappedCheckpoint::open(checkpoint_path, config_hash_, checkpoint_checked_);
    if (mapped.ok()) mapped_checkpoint_ = std::move(*mapped);
    else spdlog::warn("[{}] the checkpoint cannot be sent: {}", spec_.name, mapped.status().message());
  }
  std::optional<RoundAt> checkpoint;
  if (mapped_checkpoint_)
    checkpoint = RoundAt{mapped_checkpoint_->view().round, mapped_checkpoint_->view().anchor_digest};
  std::optional<RoundAt> asks;
  if (asker) asks = RoundAt{asker->round, asker->digest};
  std::map<std::uint64_t, RoundDeltaHeader> log;
  const std::uint64_t from = std::min(checkpoint ? checkpoint->round : state_.round, asks ? asks->round : state_.round);
  if (round_deltas_)
    for (std::uint64_t r : round_deltas_->rounds()) {
      if (r <= from || r > state_.round) continue;
      auto h = round_deltas_->header(r);
      if (h.ok() && *h) log.emplace(r, std::move(**h));
    }
  const SourcePlan plan = plan_state_source(held, asks, checkpoint, journal.commits, log, state_.anchor.size());
  std::vector<std::shared_ptr<const OpenDelta>> deltas;
  bool opened = true;
  for (std::uint64_t r : plan.rounds) {
    auto d = OpenDelta::open(round_deltas_->file(r), log.at(r));
    if (!d.ok()) {
      spdlog::warn("[{}] {}", spec_.name, d.status().message());
      opened = false;
      break;
    }
    deltas.push_back(std::move(*d));
  }
  if (opened && plan.kind == SourcePlan::deltas_from_held)
    return StateSource::from_held(plan.base, asker->digest, state_.anchor.size(), state_.layout, std::move(deltas));
  if (opened && plan.kind == SourcePlan::checkpoint_and_deltas)
    return StateSource::of(mapped_checkpoint_, std::move(deltas));
  // A checkpoint of the state held now: sent from the file, which nothing
  // writes into; when it cannot be written, from a copy of the state.
  if (Status saved = save_checkpoint(); saved.ok()) {
    auto mapped = MappedCheckpoint::open(checkpoint_path, config_hash_, checkpoint_checked_);
    if (mapped.ok() && (*mapped)->view().round == state_.round) {
      mapped_checkpoint_ = *mapped;
      return StateSource::of(std::move(*mapped), {});
    }
    spdlog::warn("[{}] the checkpoint just written cannot be sent ({}): a copy of the state is sent", spec_.name,
                 mapped.ok() ? std::string("another round") : mapped.status().message());
  } else {
    spdlog::warn("[{}] no checkpoint to send the state from ({}): a copy of the state is sent", spec_.name,
                 saved.message());
  }
  return StateSource::copy_of(state_);
}

void JobRun::offer_state(const std::string& peer, const std::string& reason, const std::optional<HeldState>& asker,
                         std::optional<std::uint64_t> listed_round) {
  std::shared_ptr<const StateSource> source;
  std::string why = reason;
  if (why.empty()) {
    auto made = state_source(asker);
    if (made.ok()) source = std::move(*made);
    else why = made.status().message();
  }
  StateOfferMessage offer = transfers_->offer(peer, source, why);
  // The tokens through the offered round and the attempt that committed it,
  // so the receiver could resume the job as its coordinator.
  if (const nlohmann::json* r = offer.reason.empty() ? journal_->committed_record(offer.round) : nullptr) {
    offer.tokens = r->value("tokens", std::uint64_t{0});
    if (r->contains("attempt") && (*r)["attempt"].is_number_unsigned())
      offer.attempt = (*r)["attempt"].get<std::uint64_t>();
  }
  // This site's records of the rounds the asker does not list, so that it lists them too.
  const std::uint64_t listed = listed_round ? *listed_round : asker ? asker->round : 0;
  if (offer.reason.empty())
    for (const auto& r : rounds_->records())
      if (r.round > listed && r.round <= offer.round)
        offer.rounds.push_back(OfferedRound{r.round, r.fragment, r.participants, r.late, r.loss, r.tokens, r.digest});
  if (offer.rounds.size() > kMaxOfferedRounds)
    offer.rounds.erase(offer.rounds.begin(), offer.rounds.end() - static_cast<std::ptrdiff_t>(kMaxOfferedRounds));
  if (offer.from_held && offer.deltas.empty())
    spdlog::info("[{}] {} holds the state of round {} already: nothing to send", spec_.name, peer, offer.round);
  else if (!offer.deltas.empty())
    spdlog::info("[{}] {} is offered the state of round {}{}: {} bytes", spec_.name, peer, offer.round,
                 offer_route(offer), source ? source->bytes() : 0);
  send_now(peer, offer);
}

void JobRun::on_state_accept(const std::string& from, const StateAcceptMessage& accept) {
  // Frames of this round already going to `from`: another holder joined or
  // stopped, and this is its share from now on (or nothing: a stop).
  if (transfers_->update(from, accept)) {
    spdlog::debug("[{}] the share of the state of round {} that {} wants from this site changed", spec_.name,
                  accept.round, from);
    return;
  }
  if (std::string why = transfers_->accept(from, accept); !why.empty()) {
    spdlog::info("[{}] {}", spec_.name, why);
    return;
  }
  note(accept.missing.empty() ? cat("sending the state of round ", accept.round, " to ", from)
                              : cat("sending the rest of the state of round ", accept.round, " to ", from,
                                    " (the frames it asks of this site)"));
  asio::co_spawn(
      env_.executor,
      [keep = shared_from_this(), from, round = accept.round, missing = accept.missing]() -> asio::awaitable<void> {
        auto sent = co_await keep->transfers_->send(from, round, missing);
        if (sent.ok()) keep->note(*sent);
        else spdlog::warn("[{}] state transfer to {} failed: {}", keep->spec_.name, from, sent.status().message());
      },
      asio::detached);
}

void JobRun::receive_state(const std::string& peer, const StateOfferMessage& offer, std::size_t holders) {
  const bool joining = transfers_->receiving();
  auto accepts = transfers_->receive(peer, offer, holders);
  if (offer.reason.empty()) {
    receiving_tokens_[offer.round] = std::max(receiving_tokens_[offer.round], offer.tokens);
    if (offer.attempt) receiving_attempt_[offer.round] = *offer.attempt;
  }
  for (const auto& r : offer.rounds) receiving_rounds_.emplace(r.round, r);
  if (!accepts.ok()) {
    // A holder of another state cannot help with this one; the transfer goes on.
    if (joining && accepts.status().code() == Err::mismatch)
      machine_->on_state_helper_refused(peer, accepts.status().message());
    else machine_->on_state_failed(accepts.status().message());
    return;
  }
  // A holder given no share (fewer frames missing than holders), or whose
  // share is all in after the cut: nothing to wait for from it.
  for (const auto& done : transfers_->shares_done()) machine_->on_state_share_done(done);
  if (joining && accepts->size() == 1 && !accepts->front().accept.missing.empty())
    note(cat("the state of round ", offer.round, " goes on from ", peer, ": the frames already here are kept"));
  else if (accepts->size() > 1)
    note(cat("the state of round ", offer.round, " comes from ", accepts->size(), " sites at once, a share each"));
  send_accepts(*accepts);
}

void JobRun::release_donor(const std::string& peer, bool hand_out) {
  send_accepts(transfers_->release(peer, hand_out));
  for (const auto& done : transfers_->shares_done()) machine_->on_state_share_done(done);
}

void JobRun::send_accepts(const std::vector<AcceptTo>& accepts) {
  for (const auto& a : accepts) send_now(a.peer, a.accept);  // now the frames may come, on every connection
}

void JobRun::on_state_frame(const std::string& peer, const transport::FrameHeader& header,
                            std::span<const std::byte> payload) {
  // Rounds sent on this site's own state are stepped where it lies unless
  // something still reads it: an exchange, or a checkpoint being written.
  // No copy of anchor and momentum: 8 bytes a parameter less at the peak
  // of a catch-up. A trainer whose phase started from this anchor keeps it
  // as its base: only the anchor is copied for it, just before the first
  // step (what the machine's KeepTrainerAnchor at install would keep).
  // Only while the machine catches up, so that a complete transfer is
  // installed at once.
  // Outside catching up no transfer is received (and a step may be writing
  // the state on other threads): the state is not offered to the frames.
  const bool trainer_base = machine_->trainer_round() == state_.round + 1;
  const bool catching_up = machine_->where() == ParticipantMachine::Where::catching_up;
  OwnState own{catching_up ? &state_ : nullptr,
               catching_up && !exchange_running_ && !checkpoint_write_ && (!trainer_base || late_anchor_.empty()),
               {}};
  if (own.in_place && trainer_base)
    own.before_step = [this] {
      late_anchor_ = state_.anchor;
      base_kept_for_install_ = true;
    };
  StateFrameOutcome out = transfers_->on_frame(peer, header, payload, std::move(own));
  switch (out.kind) {
    case StateFrameOutcome::dropped:
      spdlog::debug("[{}] state frame {} from {} dropped: no transfer from it in progress", spec_.name, header.chunk,
                    peer);
      return;
    case StateFrameOutcome::failed:
      if (out.state_lost) {
        spdlog::error(
            "[{}] this site's own state was stepped to no committed round ({}): it takes the whole state "
            "from a peer",
            spec_.name, out.error);
        drop_lost_state();
      }
      if (base_kept_for_install_) {  // no install: the copy stands for nothing
        base_kept_for_install_ = false;
        late_anchor_ = std::vector<float>();
      }
      machine_->on_state_failed(out.error, out.state_lost);
      break;
    case StateFrameOutcome::arrived:
      machine_->on_state_arrived(HeldState{out.round, out.digest});
      break;
    case StateFrameOutcome::progress:
      machine_->on_state_progress(peer, Clock::now());
      for (const auto& done : out.share_done) machine_->on_state_share_done(done);
      send_accepts(out.accepts);  // frames no holder was asked for, now asked of those sending
      break;
  }
  drive();
}

void JobRun::install_state() {
  finish_checkpoint();  // the state a checkpoint reads is replaced below
  if (std::exchange(base_kept_for_install_, false)) {
    spdlog::error("[{}] internal: a trainer's base was kept for an install the machine did not keep it for",
                  spec_.name);
    late_anchor_ = std::vector<float>();
  }
  auto installed = transfers_->install(state_, host_->snapshot().layout, Clock::now());
  if (!installed.ok()) {
    spdlog::error("[{}] {}", spec_.name, installed.status().message());
    return;
  }
  forget_delta();
  drop_spent_residual();
  anchor_committed_ = true;
  // The job's layout came with the state: a trainer of another model, or of
  // the same values in other shapes, is refused before it is welcomed.
  if (state_.layout != layout_for(state_.anchor.size()))
    if (Status s = host_->expect_layout(state_.layout); !s.ok())
      spdlog::error("[{}] the state's layout: {}", spec_.name, s.message());
  note(installed->note);
  record(history::StateSyncApplied{installed->round, installed->digest, installed->peer});
  const auto offered_tokens = receiving_tokens_.find(installed->round);
  const std::uint64_t tokens = offered_tokens == receiving_tokens_.end() ? 0 : offered_tokens->second;
  const bool chained = keep_installed_entries(*installed, tokens);
  CommittedRecord record{installed->round, installed->digest, tokens,      std::nullopt,
                         std::nullopt,     std::nullopt,      "state_sync"};
  if (auto a = receiving_attempt_.find(installed->round); a != receiving_attempt_.end()) record.attempt = a->second;
  else if (chained) record.attempt = installed->entries.back().attempt;
  journal_committed(record);
  receiving_tokens_.clear();
  receiving_attempt_.clear();
  list_installed_rounds(installed->round, installed->digest, installed->peer);
  if (auto* m = env_.metrics) {
    const Labels job{{"job", spec_.name}};
    (void)m->set("geoloco_state_sync_seconds", job, installed->seconds);
    (void)m->set("geoloco_state_sync_bytes", job, double(installed->bytes));
  }
  if (!feedback_ && compression::uses_error_feedback(spec_.compression))
    feedback_ = std::make_unique<compression::ErrorFeedback>(state_.anchor.size());
  // The round log cannot step over a state that came from a peer: a
  // checkpoint of it is where the next rebuild starts. Rounds stepped on
  // this site's own state are in its log now, which reaches them from its
  // own checkpoint: no checkpoint (12 bytes a parameter) for a catch-up.
  if (chained) {
    note(cat("rounds ", installed->entries.front().round, "..", installed->round,
             " are kept in this site's round log: it rebuilds them from its own checkpoint"));
    show_round_log_bytes();
  } else if (Status s = save_checkpoint(); !s.ok()) {
    spdlog::error("[{}] checkpoint of the installed state: {}", spec_.name, s.message());
  }
}

// Whether this site's checkpoint and round log rebuild round `round`: the
// checkpoint's round, then an entry and a journaled commit of every round
// after it through `round`. (Not so when the last install's checkpoint
// could not be written, or a round was applied without its entry.)
bool JobRun::rebuilds_from_disk(std::uint64_t round) {
  const fs::path path = fs::path(dir_) / "checkpoint.safetensors";
  if (!fs::exists(path)) return false;
  auto mapped = MappedCheckpoint::open(path, config_hash_, checkpoint_checked_);
  if (!mapped.ok()) return false;
  const std::uint64_t from = (*mapped)->view().round;
  if (from > round) return false;
  const auto logged = round_deltas_->rounds();
  const JournalSummary journal = summarize_journal(journal_->records());
  for (std::uint64_t r = from + 1; r <= round; ++r)
    if (!std::binary_search(logged.begin(), logged.end(), r) || !journal.commits.count(r)) return false;
  return true;
}

// The entries of an install stepped on this site's own state, into its
// round log, and every round but the last (the caller journals it) into its
// journal, with the tokens through it from the holders' records. False when
// any of it is missing or cannot be written: the caller then checkpoints.
bool JobRun::keep_installed_entries(const InstalledState& installed, std::uint64_t tokens) {
  const auto& entries = installed.entries;
  if (entries.empty() || !round_deltas_ || !journal_ || entries.back().round != installed.round || tokens == 0)
    return false;
  if (!rebuilds_from_disk(installed.base_round)) return false;
  std::map<std::uint64_t, std::uint64_t> through;  // round -> tokens of every round committed through it
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    through[it->round] = tokens;
    const auto listed = receiving_rounds_.find(it->round);
    if (listed == receiving_rounds_.end() || listed->second.digest != it->digest || listed->second.tokens > tokens)
      return false;  // a holder that did not list the round: its tokens are not known
    tokens -= listed->second.tokens;
  }
  for (const auto& e : entries)
    if (Status kept = round_deltas_->append(e.round, e.attempt, e.offset, e.digest, e.delta); !kept.ok()) {
      spdlog::warn(
          "[{}] round {} from the installed state cannot be kept in the round log ({}): a checkpoint "
          "is written instead",
          spec_.name, e.round, kept.message());
      return false;
    }
  for (std::size_t i = 0; i + 1 < entries.size(); ++i) {
    const auto& e = entries[i];
    if (journal_->committed_record(e.round)) continue;  // announced by its COMMITTED already
    if (Status s = journal_->append(to_json(CommittedRecord{e.round, e.digest, through.at(e.round), std::nullopt,
                                                            e.attempt, std::nullopt, "state_sync"}));
        !s.ok()) {
      spdlog::warn("[{}] round {} from the installed state cannot be journaled ({}): a checkpoint is written instead",
                   spec_.name, e.round, s.message());
      return false;
    }
  }
  return true;
}

// The rounds through `round` that this site did not apply, as the state's
// holders listed them, when their last one gave the state installed.
void JobRun::list_installed_rounds(std::uint64_t round, const std::string& digest, const std::string& peer) {
  const auto listed = std::move(receiving_rounds_);
  receiving_rounds_.clear();
  const auto last = listed.find(round);
  if (last == listed.end() || last->second.digest != digest) return;
  const std::uint64_t after = rounds_->records().empty() ? 0 : rounds_->records().back().round;
  std::vector<RoundRecord> records;
  for (auto it = listed.upper_bound(after); it != listed.end() && it->first <= round; ++it) {
    RoundRecord r;
    r.round = it->first;
    r.fragment = it->second.fragment;
    r.fragments = spec_.fragments();
    r.participants = it->second.participants;
    r.late = it->second.late;
    r.loss = it->second.loss;
    r.tokens = it->second.tokens;
    r.digest = it->second.digest;
    r.installed_from = peer;
    records.push_back(std::move(r));
  }
  if (records.empty()) return;
  if (Status kept = rounds_->append(std::span<const RoundRecord>(records)); !kept.ok())
    spdlog::error("[{}] the records of rounds {}..{} wait to be written to {}: {}", spec_.name, records.front().round,
                  records.back().round, kRoundLogFile, kept.message());
}

// ------------------------------------------------------------- checkpoints

Status JobRun::load_checkpoint() {
  const fs::path path = fs::path(dir_) / "checkpoint.safetensors";
  auto loaded = load_site_checkpoint(path, self(), config_hash_, spec_.name);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->set_aside.empty())
    spdlog::error("[{}] the checkpoint {}; the state comes from a peer", spec_.name, loaded->set_aside);
  if (!loaded->loaded) return {};
  state_ = std::move(loaded->loaded->state);
  if (loaded->loaded->residual)
    feedback_ = std::make_unique<compression::ErrorFeedback>(std::move(*loaded->loaded->residual));
  checkpoint_ = HeldState{state_.round, digest_hex(state_.anchor_digest())};
  checkpoint_checked_ = FileIdentity::of(path);  // every tensor checked against its digest as it was read
  note(cat("checkpoint of round ", state_.round, " loaded from ", path.string()));
  return {};
}

void JobRun::show_round_log_bytes() {
  if (env_.metrics && round_deltas_)
    (void)env_.metrics->set("geoloco_round_log_bytes", {{"job", spec_.name}}, double(round_deltas_->bytes()));
}

// Rounds the replay rebuilt that this site never applied (killed after its
// journal learned them): listed and recorded in the history now, as
// applied, from the plan its journal kept with its vote. The first round
// without that plan ends the list (the records stay consecutive); its
// history still names it with its digest (history::Started::rebuilt).
void JobRun::record_rebuilt_rounds(std::uint64_t from, std::uint64_t to, const JournalSummary& journal) {
  const std::uint64_t listed = rounds_->records().empty() ? 0 : rounds_->records().back().round;
  std::vector<RoundRecord> records;
  for (std::uint64_t round = std::max(from, listed) + 1; round <= to; ++round) {
    const JournaledCommit& c = journal.commits.at(round);
    std::string coordinator;
    const auto plan = journaled_plan(journal_->records(), round, c.attempt, coordinator);
    if (!plan) break;
    RoundRecord r;
    describe_round(r, *plan, round, c.digest);
    r.contributed = std::find(plan->participants.begin(), plan->participants.end(), self()) != plan->participants.end();
    r.installed_from = "round log";
    records.push_back(std::move(r));
    record(committed_event(*plan, round, records.back().fragment, coordinator, plan->epoch, c.digest,
                           journal.final && round == journal.round));
  }
  if (records.empty()) return;
  if (Status kept = rounds_->append(std::span<const RoundRecord>(records)); !kept.ok())
    spdlog::error("[{}] the records of rounds {}..{} wait to be written to {}: {}", spec_.name, records.front().round,
                  records.back().round, kRoundLogFile, kept.message());
}

void JobRun::replay_round_log() {
  if (!round_deltas_ || !journal_ || state_.anchor.empty()) return;
  const JournalSummary journal = summarize_journal(journal_->records());
  if (journal.round <= state_.round) return;
  const std::uint64_t from = state_.round;
  auto replayed = replay_rounds(state_, *round_deltas_, journal.commits, journal.round, spec_.compression,
                                spec_.outer.outer, env_.site.pass_threads());
  if (!replayed.ok()) {
    // Stepped to no committed anchor: nothing of it is used; a peer gives the state.
    spdlog::error("[{}] the round log cannot rebuild the committed state: {}; the state comes from a peer", spec_.name,
                  replayed.status().message());
    state_ = outer::OuterState();
    feedback_.reset();
    checkpoint_.reset();
    return;
  }
  if (replayed->to > from) {
    // The residual the checkpoint saved was already sent in the rounds just
    // replayed, and what those rounds' encodes dropped is not on disk: the
    // site starts again with none (at most one round's rounding is lost).
    if (feedback_) feedback_ = std::make_unique<compression::ErrorFeedback>(state_.anchor.size());
    checkpoint_ = HeldState{replayed->to, replayed->digest};
    for (std::uint64_t r = from + 1; r <= replayed->to; ++r) rebuilt_.push_back({r, journal.commits.at(r).digest});
    record_rebuilt_rounds(from, replayed->to, journal);
    note(cat("rounds ", from + 1, "..", replayed->to, " replayed from the round log on the checkpoint of round ", from,
             " (", replayed->bytes, " bytes): anchor ", replayed->digest));
  }
  if (!replayed->stopped.empty())
    note(cat("the round log rebuilds round ", replayed->to, ", not the journal's ", journal.round, ": ",
             replayed->stopped));
  if (env_.metrics)
    (void)env_.metrics->set("geoloco_round_log_replayed_rounds", {{"job", spec_.name}}, double(replayed->to - from));
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
  v.coordinator = coordinator();
  v.epoch = succession_ ? succession_->epoch() : 0;
  v.sites = spec_.sites;
  v.round = state_.round;
  v.stop_rounds = spec_.last_round();
  v.fragments = spec_.fragments();
  v.bytes_sent = rounds_->bytes_sent();
  v.bytes_received = rounds_->bytes_received();
  v.records = &rounds_->records();
  v.eval = inner::read_eval_log((fs::path(dir_) / "eval.jsonl").string());
  if (const fs::path c = fs::path(dir_) / "checkpoint.safetensors"; fs::exists(c)) v.checkpoint = c.string();
  if (!state_.anchor.empty()) {
    // The committed state's digest as the machine holds it; hashed again
    // only when it is not at hand (a pass over the whole anchor: seconds at
    // tens of billions of parameters, on the daemon's thread).
    // Not while the step writes the anchor on other threads: the machine's digest then.
    const auto& held = machine_ ? machine_->held() : std::optional<HeldState>();
    if (anchor_committed_ && held && held->round == state_.round && !held->digest.empty())
      v.anchor_digest = held->digest;
    else if (!step_running_) v.anchor_digest = digest_hex(state_.anchor_digest());
  }
  if (role_) v.liveness.emplace(role_->live_sites(), role_->lagging());
  v.job_dir = dir_;
  v.where = machine_ ? std::string(ParticipantMachine::where_name(machine_->where())) : std::string("starting");
  return status_json(v);
}

}  // namespace geoloco::daemon
