#include "daemon/decision_outbox.h"

#include "daemon/journal_records.h"

namespace geoloco::daemon {

void DecisionOutbox::add(nlohmann::json record, std::string what, std::function<void()> send) {
  queued_.push_back(Decision{std::move(record), std::move(what), std::move(send)});
}

DecisionOutbox::Flushed DecisionOutbox::flush(Clock::time_point now, const Write& write) {
  Flushed out;
  while (!queued_.empty()) {
    Decision& d = queued_.front();
    if (Status written = write(d.record); !written.ok()) {
      out.all_written = false;
      if (!refused_since_) {
        refused_since_ = now;
        // "paused:" puts it in `geoloco status` too.
        out.notes.push_back(cat("paused: cannot journal ", d.what, " (", written.message(),
                                "); nothing of it is sent, and it is tried again every second"));
      }
      if (!handed_on_ && now - *refused_since_ >= hand_on_after_) {
        handed_on_ = true;
        out.hand_on_why =
            cat("its journal refused ", d.what, " for ",
                std::chrono::duration_cast<Millis>(now - *refused_since_).count() / 1000, " s: ", written.message());
      }
      return out;
    }
    if (refused_since_) {
      out.notes.push_back(cat("the journal is written again after ",
                              std::chrono::duration_cast<Millis>(now - *refused_since_).count() / 1000, " s: ", d.what,
                              " goes out"));
      refused_since_.reset();
      handed_on_ = false;
      out.written_again = true;
    }
    auto send = std::move(d.send);
    queued_.pop_front();
    send();
  }
  return out;
}

nlohmann::json plan_record(std::uint64_t round, std::uint64_t attempt, const std::vector<std::string>& participants,
                           const std::vector<double>& weights, const std::vector<std::string>& late,
                           std::uint64_t epoch) {
  return to_json(PlanRecord{round, attempt, participants, weights, late, epoch});
}

nlohmann::json committed_record(std::uint64_t round, const std::string& anchor_digest, std::uint64_t tokens, bool final,
                                std::uint64_t attempt, std::uint64_t epoch) {
  return to_json(CommittedRecord{round, anchor_digest, tokens, final, attempt, epoch, ""});
}

nlohmann::json abort_record(std::uint64_t round, const std::string& reason, std::uint64_t epoch) {
  return to_json(AbortRecord{round, reason, epoch});
}

}  // namespace geoloco::daemon
