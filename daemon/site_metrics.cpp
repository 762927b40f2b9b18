#include "daemon/site_metrics.h"

#include <tuple>
#include <vector>

namespace geoloco::daemon {

void declare_site_metrics(Metrics& metrics) {
  using T = Metrics::Type;
  const std::vector<std::tuple<const char*, T, const char*>> all{
      {"geoloco_rounds_total", T::counter, "Rounds committed by this site."},
      {"geoloco_round", T::gauge, "The last committed round."},
      {"geoloco_round_participants", T::gauge, "Sites whose pseudo-gradient was in the last round."},
      {"geoloco_stragglers_total", T::counter, "Sites left out of rounds (late), summed over rounds."},
      {"geoloco_loss", T::gauge, "Participants' mean training loss in the last round."},
      {"geoloco_eval_loss", T::gauge, "Held-out loss of the latest anchor, from the trainer's eval log."},
      {"geoloco_compression_ratio", T::gauge, "Raw fp32 bytes / bytes sent by this site, last round."},
      {"geoloco_round_compute_seconds", T::gauge, "This site's inner phase, last round."},
      {"geoloco_round_waiting_seconds", T::gauge, "READY to PLAN, last round."},
      {"geoloco_round_exchange_seconds", T::gauge, "PLAN to COMMITTED, last round."},
      {"geoloco_compute_share", T::gauge,
       "The trainer's seconds in inner steps over its loop's seconds (evaluations aside), last round."},
      {"geoloco_trainer_compute_seconds_total", T::counter,
       "The trainer's seconds in inner steps, summed over committed rounds (as its SYNCs reported them)."},
      {"geoloco_trainer_loop_seconds_total", T::counter,
       "The trainer's loop seconds without evaluations, summed over the same rounds."},
      {"geoloco_tokens_total", T::counter, "Tokens of the committed rounds."},
      {"geoloco_dropped_tokens_total", T::counter, "Tokens of late work this site dropped (straggler policy)."},
      {"geoloco_checkpoint_round", T::gauge, "Round of the last checkpoint saved."},
      {"geoloco_checkpoint_seconds", T::gauge, "Wall time of the last checkpoint saved."},
      {"geoloco_round_cpu_seconds", T::gauge,
       "This daemon's CPU seconds in the last round it applied, by stage (the round's record in status: costs)."},
      {"geoloco_round_cpu_seconds_total", T::counter, "This daemon's CPU seconds in the rounds it applied, by stage."},
      {"geoloco_round_decodes_per_chunk", T::gauge, "Passes over the averaged Δ that decoded it, last round."},
      {"geoloco_round_encodes_per_chunk", T::gauge,
       "Passes over this site's contribution that encoded it, last round."},
      {"geoloco_round_loop_busy_seconds", T::gauge,
       "The longest the daemon's event loop was held at once in the last round applied (heartbeats waited as long)."},
      {"geoloco_round_log_bytes", T::gauge,
       "Bytes of the round log on disk: the averaged Δ of each round voted for since the checkpoint."},
      {"geoloco_round_log_replayed_rounds", T::gauge,
       "Rounds the last start stepped from the round log on top of the checkpoint."},
      {"geoloco_journal_write_failures_total", T::counter,
       "Journal records that could not be written; what depended on them was not sent, and is retried."},
      {"geoloco_state_sync_seconds", T::gauge,
       "The last state transfer this site received (STATE_SYNC): request to state in place."},
      {"geoloco_state_sync_bytes", T::gauge, "Frame bytes of the last state transfer this site received."},
      {"geoloco_peer_sent_bytes_total", T::counter, "Frame bytes sent to a peer."},
      {"geoloco_peer_received_bytes_total", T::counter, "Frame bytes received from a peer."},
      {"geoloco_rejected_frames_total", T::counter, "Frames refused (bad certificate, checksum, stale round, ...)."},
      {"geoloco_jobs", T::gauge, "Jobs on this site by state."},
      {"geoloco_coordinator_epoch", T::gauge,
       "The epoch of the coordinator's office this site follows (0: the job's named coordinator)."},
      {"geoloco_failovers_total", T::counter,
       "Successors that took the coordinator's office, as this site learned of them."},
      {"geoloco_fenced_messages_total", T::counter, "PLAN, COMMITTED and ABORT refused because their epoch is over."},
      {"geoloco_tls_certificate_expiry_timestamp_seconds", T::gauge,
       "notAfter of this site's certificate (certificate=site), the CA's (ca) and each connected peer's (peer), Unix "
       "seconds."},
      {"geoloco_tls_crl_next_update_timestamp_seconds", T::gauge,
       "The CRL's next update, Unix seconds: past it every peer is refused."},
      {"geoloco_tls_reloads_total", T::counter, "TLS reloads (SIGHUP) applied or refused."},
      {"geoloco_tls_connections_replaced_total", T::counter, "Peer connections replaced after a TLS reload."},
  };
  for (const auto& [name, type, help] : all) (void)metrics.declare(name, type, help);
}

void show_committed_round(Metrics& m, const std::string& job_name, const RoundRecord& r) {
  const Labels job{{"job", job_name}};
  (void)m.add("geoloco_rounds_total", job, 1);
  (void)m.set("geoloco_round", job, double(r.round));
  (void)m.set("geoloco_round_participants", job, double(r.participants.size()));
  (void)m.add("geoloco_stragglers_total", job, double(r.late.size()));
  (void)m.set("geoloco_loss", job, r.loss);
  (void)m.set("geoloco_compression_ratio", job, r.compression_ratio);
  (void)m.set("geoloco_round_compute_seconds", job, r.compute_seconds);
  (void)m.set("geoloco_round_waiting_seconds", job, r.waiting_seconds);
  (void)m.set("geoloco_round_exchange_seconds", job, r.exchange_seconds);
  if (auto share = r.compute_share()) {
    (void)m.set("geoloco_compute_share", job, *share);
    (void)m.add("geoloco_trainer_compute_seconds_total", job, *r.trainer_compute_seconds);
    (void)m.add("geoloco_trainer_loop_seconds_total", job, *r.trainer_loop_seconds);
  }
  (void)m.add("geoloco_tokens_total", job, double(r.tokens));
  if (r.costs) show_round_costs(m, job_name, *r.costs);
}

void show_round_costs(Metrics& m, const std::string& job_name, const RoundCosts& c) {
  for (const auto& stage : kCostStages) {
    const Labels labels{{"job", job_name}, {"stage", std::string(stage.name)}};
    (void)m.set("geoloco_round_cpu_seconds", labels, c.*stage.seconds);
    (void)m.add("geoloco_round_cpu_seconds_total", labels, c.*stage.seconds);
  }
  const Labels job{{"job", job_name}};
  (void)m.set("geoloco_round_decodes_per_chunk", job, c.decodes_per_chunk());
  (void)m.set("geoloco_round_encodes_per_chunk", job, c.encodes_per_chunk());
  (void)m.set("geoloco_round_loop_busy_seconds", job, c.loop_busy_seconds);
}

}  // namespace geoloco::daemon
