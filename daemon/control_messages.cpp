#include "daemon/control_messages.h"

#include "common/overload.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace geoloco::daemon {

namespace {

using nlohmann::json;

bool is_digest(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Field readers: each records the first problem and leaves the value alone.
class Fields {
 public:
  Fields(const json& j, std::string_view type) : j_(j), type_(type) {}
  void u64(const char* key, std::uint64_t& out) {
    if (const json* v = find(key); v && !v->is_number_unsigned()) fail(key, "a non-negative integer");
    else if (v) out = v->get<std::uint64_t>();
  }
  void f64(const char* key, double& out) {
    if (const json* v = find(key); v && (!v->is_number() || !std::isfinite(v->get<double>())))
      fail(key, "a finite number");
    else if (v) out = v->get<double>();
  }
  void opt_f64(const char* key, double& out) {
    if (j_.contains(key)) f64(key, out);
  }
  void opt_u64(const char* key, std::uint64_t& out) {
    if (j_.contains(key)) u64(key, out);
  }
  void opt_str(const char* key, std::string& out, std::size_t max = 256) {
    if (j_.contains(key)) str(key, out, max);
  }
  bool has(const char* key) const { return j_.contains(key); }
  void opt_bool(const char* key, bool& out) {
    if (!j_.contains(key)) return;
    if (!j_[key].is_boolean()) fail(key, "true or false");
    else out = j_[key].get<bool>();
  }
  void str(const char* key, std::string& out, std::size_t max = 256) {
    if (const json* v = find(key); v && (!v->is_string() || v->get_ref<const std::string&>().size() > max))
      fail(key, cat("a string of at most ", max, " characters"));
    else if (v) out = v->get<std::string>();
  }
  void strings(const char* key, std::vector<std::string>& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array() || v->size() > 4096) return fail(key, "a list of at most 4096 names");
    for (const auto& e : *v) {
      if (!e.is_string() || e.get_ref<const std::string&>().empty() || e.get_ref<const std::string&>().size() > 64)
        return fail(key, "a list of site names");
      out.push_back(e.get<std::string>());
    }
  }
  void counts(const char* key, std::vector<std::uint64_t>& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array() || v->size() > 4096) return fail(key, "a list of at most 4096 non-negative integers");
    for (const auto& e : *v) {
      if (!e.is_number_unsigned()) return fail(key, "a list of non-negative integers");
      out.push_back(e.get<std::uint64_t>());
    }
  }
  void numbers(const char* key, std::vector<double>& out) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array() || v->size() > 4096) return fail(key, "a list of at most 4096 numbers");
    for (const auto& e : *v) {
      if (!e.is_number() || !std::isfinite(e.get<double>())) return fail(key, "a list of finite numbers");
      out.push_back(e.get<double>());
    }
  }
  // Optional: a list of {name, shape} whose sizes add up to `values`.
  void layout(const char* key, Layout& out, std::uint64_t values) {
    if (!j_.contains(key)) return;
    const json& v = j_[key];
    if (!v.is_array() || v.size() > (1u << 16)) return fail(key, "a list of at most 65536 tensors");
    std::uint64_t total = 0;
    for (const auto& e : v) {
      const auto name = e.is_object() ? e.find("name") : e.end();
      const auto shape = e.is_object() ? e.find("shape") : e.end();
      if (name == e.end() || !name->is_string() || name->get_ref<const std::string&>().empty() ||
          name->get_ref<const std::string&>().size() > 1024 || shape == e.end() || !shape->is_array() ||
          shape->size() > 8)
        return fail(key, "a list of {name, shape} with shapes of rank 8 at most");
      TensorDesc t{name->get<std::string>(), {}, total};
      std::uint64_t size = 1;
      for (const auto& d : *shape) {
        if (!d.is_number_unsigned() || d.get<std::uint64_t>() == 0 || d.get<std::uint64_t>() > kMaxLayoutValues)
          return fail(key, "shapes of dimensions 1..2^36");
        if (size > kMaxLayoutValues / d.get<std::uint64_t>()) return fail(key, "tensors of at most 2^36 values");
        size *= d.get<std::uint64_t>();
      }
      total += size;
      if (total > kMaxLayoutValues) return fail(key, "at most 2^36 values in all");
      out.push_back(std::move(t));
      for (const auto& d : *shape) out.back().shape.push_back(d.get<std::uint64_t>());
    }
    if (!out.empty() && total != values)
      return fail(key, cat("tensors that add up to the offer's ", values, " values"));
    if (Status rules = check_layout(out); !out.empty() && !rules.ok())
      fail(key, cat("a valid layout (", rules.message(), ")"));
  }
  void check(bool ok, const std::string& what) {
    if (!ok && status_.ok()) status_ = Status(Err::malformed, cat(type_, " message: ", what));
  }
  const Status& status() const { return status_; }
  /// The first problem of a nested record's fields, as this message's.
  void absorb(const Fields& nested) {
    if (status_.ok() && !nested.status_.ok()) status_ = nested.status_;
  }

 private:
  const json* find(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end()) {
      fail(key, "present");
      return nullptr;
    }
    return &*it;
  }
  void fail(const char* key, const std::string& expected) {
    if (status_.ok()) status_ = Status(Err::malformed, cat(type_, " message: field '", key, "' must be ", expected));
  }
  const json& j_;
  std::string_view type_;
  Status status_;
};

}  // namespace

std::string_view control_type_name(const ControlMessage& m) {
  return std::visit(
      Overload{[](const JoinMessage&) { return "join"; }, [](const HeartbeatMessage&) { return "heartbeat"; },
               [](const ReadyMessage&) { return "ready"; }, [](const PlanMessage&) { return "plan"; },
               [](const CommitMessage&) { return "commit"; }, [](const CommittedMessage&) { return "committed"; },
               [](const AbortMessage&) { return "abort"; }, [](const FailedMessage&) { return "failed"; },
               [](const JobStartMessage&) { return "job_start"; }, [](const JobCancelMessage&) { return "job_cancel"; },
               [](const StateRequestMessage&) { return "state_request"; },
               [](const StateOfferMessage&) { return "state_offer"; },
               [](const StateAcceptMessage&) { return "state_accept"; }, [](const ElectMessage&) { return "elect"; },
               [](const VoteMessage&) { return "vote"; }, [](const RoundQueryMessage&) { return "round_query"; },
               [](const RoundOutcomeMessage&) { return "round_outcome"; }},
      m);
}

bool for_coordinator(const ControlMessage& m) {
  return std::holds_alternative<JoinMessage>(m) || std::holds_alternative<HeartbeatMessage>(m) ||
         std::holds_alternative<ReadyMessage>(m) || std::holds_alternative<CommitMessage>(m) ||
         std::holds_alternative<FailedMessage>(m);
}

bool for_coordinator_after_end(const ControlMessage& m) { return std::holds_alternative<CommitMessage>(m); }

std::string encode_control(const ControlMessage& message) {
  json j = std::visit(
      Overload{
          [](const JoinMessage& m) {
            return json{
                {"job", m.job}, {"last_committed_round", m.last_committed_round}, {"anchor_digest", m.anchor_digest}};
          },
          [](const HeartbeatMessage& m) {
            return json{{"round", m.round},
                        {"phase", m.phase},
                        {"epoch", m.epoch},
                        {"coordinator", m.coordinator},
                        {"committed", m.committed}};
          },
          [](const ReadyMessage& m) {
            return json{{"round", m.round},
                        {"anchor_round", m.anchor_round},
                        {"tokens", m.tokens},
                        {"inner_steps", m.inner_steps},
                        {"loss", m.loss}};
          },
          [](const PlanMessage& m) {
            return json{{"round", m.round},   {"participants", m.participants}, {"weights", m.weights},
                        {"late", m.late},     {"attempt", m.attempt},           {"loss", m.loss},
                        {"tokens", m.tokens}, {"tokens_each", m.tokens_each},   {"anchor_rounds", m.anchor_rounds},
                        {"epoch", m.epoch}};
          },
          [](const CommitMessage& m) {
            return json{{"round", m.round}, {"anchor_digest", m.anchor_digest}, {"attempt", m.attempt}};
          },
          [](const CommittedMessage& m) {
            json j{{"round", m.round},
                   {"anchor_digest", m.anchor_digest},
                   {"final", m.final},
                   {"epoch", m.epoch},
                   {"tokens", m.tokens}};
            if (m.attempt) j["attempt"] = *m.attempt;
            return j;
          },
          [](const AbortMessage& m) {
            return json{{"round", m.round}, {"attempt", m.attempt}, {"reason", m.reason}, {"epoch", m.epoch}};
          },
          [](const FailedMessage& m) {
            json j{{"round", m.round}, {"attempt", m.attempt}, {"reason", m.reason}};
            if (m.own) j["own"] = true;
            return j;
          },
          [](const JobStartMessage& m) {
            return json{{"job", m.job}, {"file", m.file}, {"yaml", m.yaml}};
          },
          [](const JobCancelMessage& m) {
            return json{{"job", m.job}, {"reason", m.reason}};
          },
          [](const StateRequestMessage& m) {
            json j{{"job", m.job}};
            if (m.held_round) {
              j["held_round"] = *m.held_round;
              j["held_digest"] = m.held_digest;
            }
            if (m.listed_round) j["listed_round"] = *m.listed_round;
            return j;
          },
          [](const StateAcceptMessage& m) {
            json j{{"job", m.job}, {"round", m.round}};
            if (!m.missing.empty()) j["missing"] = m.missing;
            if (m.stop) j["stop"] = true;
            return j;
          },
          [](const StateOfferMessage& m) {
            json layout = json::array();
            for (const auto& t : m.layout) layout.push_back(json{{"name", t.name}, {"shape", t.shape}});
            json j{{"job", m.job},
                   {"round", m.round},
                   {"anchor_digest", m.anchor_digest},
                   {"values", m.values},
                   {"chunk_values", m.chunk_values},
                   {"reason", m.reason},
                   {"layout", layout},
                   {"tokens", m.tokens}};
            if (m.attempt) j["attempt"] = *m.attempt;
            if (!m.momentum_digest.empty()) j["momentum_digest"] = m.momentum_digest;
            if (m.base_round) {
              j["base_round"] = *m.base_round;
              j["base_digest"] = m.base_digest;
            }
            if (m.from_held) j["from_held"] = true;
            if (!m.deltas.empty()) {
              json d = json::array();
              for (const auto& e : m.deltas) d.push_back(json::array({e.round, e.bytes, e.hash, e.digest}));
              j["deltas"] = std::move(d);
            }
            if (!m.rounds.empty()) {
              json rounds = json::array();
              for (const auto& r : m.rounds)
                rounds.push_back(json{{"round", r.round},
                                      {"fragment", r.fragment},
                                      {"participants", r.participants},
                                      {"late", r.late},
                                      {"loss", r.loss},
                                      {"tokens", r.tokens},
                                      {"digest", r.digest}});
              j["rounds"] = std::move(rounds);
            }
            return j;
          },
          [](const ElectMessage& m) {
            return json{{"epoch", m.epoch}, {"pre", m.pre}, {"committed_round", m.committed_round}};
          },
          [](const VoteMessage& m) {
            json standing{{"committed_round", m.standing.committed_round},
                          {"anchor_digest", m.standing.anchor_digest},
                          {"tokens", m.standing.tokens},
                          {"final", m.standing.final},
                          {"newest_round", m.standing.newest_round},
                          {"newest_attempt", m.standing.newest_attempt}};
            if (m.standing.committed_attempt) standing["committed_attempt"] = *m.standing.committed_attempt;
            if (const auto& p = m.standing.pending)
              standing["pending"] = json{{"round", p->round},
                                         {"attempt", p->attempt},
                                         {"anchor_digest", p->anchor_digest},
                                         {"tokens", p->tokens},
                                         {"participant", p->participant}};
            return json{{"epoch", m.epoch},
                        {"pre", m.pre},
                        {"granted", m.granted},
                        {"reason", m.reason},
                        {"coordinator", m.coordinator},
                        {"standing", standing}};
          },
          [](const RoundQueryMessage& m) {
            return json{{"round", m.round}};
          },
          [](const RoundOutcomeMessage& m) {
            return json{{"round", m.round}, {"attempt", m.attempt}, {"anchor_digest", m.anchor_digest}};
          },
      },
      message);
  j["type"] = std::string(control_type_name(message));
  return j.dump();
}

Result<ControlMessage> decode_control(std::string_view text) {
  GEOLOCO_RETURN_IF(text.size() > (1u << 20), Err::too_large, "control message of ", text.size(),
                    " bytes exceeds 1 MiB");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  GEOLOCO_RETURN_IF(j.is_discarded() || !j.is_object(), Err::malformed, "control message is not a JSON object");
  auto type_it = j.find("type");
  GEOLOCO_RETURN_IF(type_it == j.end() || !type_it->is_string(), Err::malformed, "control message has no type");
  const std::string type = type_it->get<std::string>();
  Fields f(j, type);
  // An optional round named with its anchor digest (both, or neither).
  auto round_and_digest = [&](const char* round_key, const char* digest_key, std::optional<std::uint64_t>& round,
                              std::string& digest) {
    if (!f.has(round_key)) return;
    std::uint64_t r = 0;
    f.u64(round_key, r);
    round = r;
    f.str(digest_key, digest);
    f.check(is_digest(digest), cat(digest_key, " must be 16 hex digits"));
  };
  ControlMessage out;
  if (type == "join") {
    JoinMessage m;
    f.str("job", m.job);
    f.u64("last_committed_round", m.last_committed_round);
    f.str("anchor_digest", m.anchor_digest);
    f.check(m.anchor_digest.empty() || is_digest(m.anchor_digest), "anchor_digest must be 16 hex digits");
    f.check(m.last_committed_round == 0 || !m.anchor_digest.empty(), "a committed round needs its anchor_digest");
    out = m;
  } else if (type == "heartbeat") {
    HeartbeatMessage m;
    f.u64("round", m.round);
    f.str("phase", m.phase);
    f.check(m.phase == "inner" || m.phase == "ready" || m.phase == "exchange" || m.phase == "idle" ||
                m.phase == "catching_up",
            cat("unknown phase '", m.phase, "'"));
    f.opt_u64("epoch", m.epoch);
    f.opt_str("coordinator", m.coordinator, 64);
    f.opt_u64("committed", m.committed);
    f.check(m.epoch < kMaxEpochs, cat("epoch must be < ", kMaxEpochs));
    out = m;
  } else if (type == "ready") {
    ReadyMessage m;
    f.u64("round", m.round);
    f.u64("anchor_round", m.anchor_round);
    f.u64("tokens", m.tokens);
    f.u64("inner_steps", m.inner_steps);
    f.f64("loss", m.loss);
    f.check(m.round >= 1, "round starts at 1");
    f.check(m.anchor_round >= 1 && m.anchor_round <= m.round,
            "anchor_round must be between 1 and round (equal when on time)");
    out = m;
  } else if (type == "plan") {
    PlanMessage m;
    f.u64("round", m.round);
    f.strings("participants", m.participants);
    f.numbers("weights", m.weights);
    f.strings("late", m.late);
    f.opt_u64("attempt", m.attempt);
    f.opt_f64("loss", m.loss);
    f.opt_u64("tokens", m.tokens);
    f.counts("tokens_each", m.tokens_each);
    f.counts("anchor_rounds", m.anchor_rounds);
    f.opt_u64("epoch", m.epoch);
    f.check(m.epoch < kMaxEpochs, cat("epoch must be < ", kMaxEpochs));
    f.check(m.attempt <= kMaxAttempt, cat("attempt must be < 2^32"));
    f.check(!m.participants.empty(), "a plan needs participants");
    f.check(m.weights.size() == m.participants.size(), "one weight per participant");
    f.check(m.tokens_each.size() == m.participants.size(), "one tokens_each per participant");
    f.check(m.anchor_rounds.size() == m.participants.size(), "one anchor_rounds per participant");
    for (auto a : m.anchor_rounds) f.check(a >= 1 && a <= m.round, "anchor_rounds must be between 1 and round");
    for (double w : m.weights) f.check(w > 0, "weights must be > 0");
    out = m;
  } else if (type == "commit" || type == "committed") {
    std::uint64_t round = 0, attempt = 0, epoch = 0, tokens = 0;
    std::string digest;
    bool final = false;
    f.u64("round", round);
    f.str("anchor_digest", digest);
    if (type == "committed") {
      f.opt_bool("final", final);
      f.opt_u64("epoch", epoch);
      f.opt_u64("tokens", tokens);
    }
    f.opt_u64("attempt", attempt);
    f.check(is_digest(digest), "anchor_digest must be 16 hex digits");
    f.check(attempt <= kMaxAttempt, "attempt must be < 2^32");
    f.check(epoch < kMaxEpochs, cat("epoch must be < ", kMaxEpochs));
    if (type == "commit") {
      out = CommitMessage{round, digest, attempt};
    } else {
      CommittedMessage c{round, digest, final, std::nullopt, epoch, tokens};
      if (f.has("attempt")) c.attempt = attempt;
      out = c;
    }
  } else if (type == "abort") {
    AbortMessage m;
    f.u64("round", m.round);
    f.u64("attempt", m.attempt);
    f.str("reason", m.reason, 4096);
    f.opt_u64("epoch", m.epoch);
    f.check(m.attempt <= kMaxAttempt, "attempt must be < 2^32");
    f.check(m.epoch < kMaxEpochs, cat("epoch must be < ", kMaxEpochs));
    out = m;
  } else if (type == "failed") {
    FailedMessage m;
    f.u64("round", m.round);
    f.u64("attempt", m.attempt);
    f.str("reason", m.reason, 4096);
    f.opt_bool("own", m.own);
    f.check(m.attempt <= kMaxAttempt, "attempt must be < 2^32");
    out = m;
  } else if (type == "job_start") {
    JobStartMessage m;
    f.str("job", m.job);
    f.str("file", m.file, 4096);
    f.str("yaml", m.yaml, 512 * 1024);
    f.check(!m.job.empty(), "job must name the job");
    out = m;
  } else if (type == "job_cancel") {
    JobCancelMessage m;
    f.str("job", m.job);
    f.str("reason", m.reason, 4096);
    out = m;
  } else if (type == "state_request") {
    StateRequestMessage m;
    f.str("job", m.job);
    round_and_digest("held_round", "held_digest", m.held_round, m.held_digest);
    if (f.has("listed_round")) {
      std::uint64_t listed = 0;
      f.u64("listed_round", listed);
      m.listed_round = listed;
    }
    out = m;
  } else if (type == "state_accept") {
    StateAcceptMessage m;
    f.str("job", m.job);
    f.u64("round", m.round);
    if (f.has("missing")) f.counts("missing", m.missing);
    f.check(m.missing.size() % 2 == 0, "missing must be [begin, end) pairs");
    for (std::size_t i = 0; i + 1 < m.missing.size(); i += 2)
      f.check(m.missing[i] < m.missing[i + 1] && (i == 0 || m.missing[i - 1] <= m.missing[i]),
              "missing must be ordered, non-empty [begin, end) ranges");
    f.opt_bool("stop", m.stop);
    f.check(!m.stop || m.missing.empty(), "a stop names no frames");
    out = m;
  } else if (type == "state_offer") {
    StateOfferMessage m;
    f.str("job", m.job);
    f.u64("round", m.round);
    f.str("anchor_digest", m.anchor_digest);
    f.opt_str("momentum_digest", m.momentum_digest);
    f.check(m.momentum_digest.empty() || is_digest(m.momentum_digest), "momentum_digest must be 16 hex digits");
    f.u64("values", m.values);
    f.u64("chunk_values", m.chunk_values);
    f.str("reason", m.reason, 4096);
    f.layout("layout", m.layout, m.values);
    f.opt_u64("tokens", m.tokens);
    if (f.has("attempt")) {
      std::uint64_t attempt = 0;
      f.u64("attempt", attempt);
      f.check(attempt <= kMaxAttempt, "attempt must be < 2^32");
      m.attempt = attempt;
    }
    round_and_digest("base_round", "base_digest", m.base_round, m.base_digest);
    f.opt_bool("from_held", m.from_held);
    if (f.has("deltas")) {
      const json& d = j["deltas"];
      f.check(d.is_array() && d.size() <= kMaxOfferedDeltas,
              cat("deltas must be a list of at most ", kMaxOfferedDeltas, " [round, bytes, hash, digest]"));
      if (d.is_array() && d.size() <= kMaxOfferedDeltas)
        for (const auto& e : d) {
          const bool shaped = e.is_array() && e.size() == 4 && e[0].is_number_unsigned() && e[1].is_number_unsigned() &&
                              e[2].is_string() && e[3].is_string();
          f.check(shaped, "each of deltas must be [round, bytes, hash, digest]");
          if (!shaped) break;
          StateDeltaOffer o{e[0].get<std::uint64_t>(), e[1].get<std::uint64_t>(), e[2].get<std::string>(),
                            e[3].get<std::string>()};
          f.check(is_digest(o.hash) && is_digest(o.digest), "a delta's hash and digest must be 16 hex digits");
          f.check(o.bytes >= 1 && o.bytes <= kMaxOfferedDeltaBytes, "a delta's bytes must be 1..2^40");
          m.deltas.push_back(std::move(o));
        }
    }
    if (f.has("rounds")) {
      const json& rounds = j["rounds"];
      f.check(rounds.is_array() && rounds.size() <= kMaxOfferedRounds,
              cat("rounds must be a list of at most ", kMaxOfferedRounds, " records"));
      if (rounds.is_array() && rounds.size() <= kMaxOfferedRounds)
        for (const auto& e : rounds) {
          f.check(e.is_object(), "each of rounds must be an object");
          if (!e.is_object()) break;
          Fields r(e, "state_offer (an entry of rounds)");
          OfferedRound o;
          std::uint64_t fragment = 0;
          r.u64("round", o.round);
          r.u64("fragment", fragment);
          r.strings("participants", o.participants);
          r.strings("late", o.late);
          r.f64("loss", o.loss);
          r.u64("tokens", o.tokens);
          r.str("digest", o.digest);
          r.check(fragment < (1u << 16), "fragment must be < 65536");
          r.check(is_digest(o.digest), "digest must be 16 hex digits");
          r.check(!o.participants.empty(), "a round has participants");
          r.check(o.round >= 1 && o.round <= m.round, "a listed round must be 1..round");
          r.check(m.rounds.empty() || m.rounds.back().round < o.round, "rounds must be listed in order, once each");
          f.absorb(r);
          if (!r.status().ok()) break;
          o.fragment = static_cast<std::uint32_t>(fragment);
          m.rounds.push_back(std::move(o));
        }
    }
    // The entries are of the rounds after the base, in order, through `round`.
    if (m.base_round || !m.deltas.empty() || m.from_held) {
      const std::uint64_t base = m.base_round.value_or(m.round);
      bool in_order = base <= m.round && m.deltas.size() == m.round - base;
      for (std::size_t i = 0; in_order && i < m.deltas.size(); ++i) in_order = m.deltas[i].round == base + 1 + i;
      f.check(in_order, "deltas must be the rounds base_round + 1 .. round, in order");
      f.check(m.base_round.has_value(), "an offer with deltas names its base_round");
      f.check(m.deltas.empty() || m.deltas.back().digest == m.anchor_digest,
              "the last delta's digest must be anchor_digest");
      // None: the asker holds the offered round itself.
      f.check(!m.from_held || !m.deltas.empty() || m.base_digest == m.anchor_digest,
              "from_held without deltas must name the anchor_digest as its base_digest");
    }
    if (m.reason.empty()) {
      f.check(is_digest(m.anchor_digest), "anchor_digest must be 16 hex digits");
      f.check(m.values >= 1 && m.values <= kMaxLayoutValues, "values must be 1..2^36");
      f.check(m.chunk_values >= 1024 && m.chunk_values <= (16u << 20), "chunk_values must be 1024..16Mi");
    }
    out = m;
  } else if (type == "elect") {
    ElectMessage m;
    f.u64("epoch", m.epoch);
    f.opt_bool("pre", m.pre);
    f.u64("committed_round", m.committed_round);
    f.check(m.epoch >= 1 && m.epoch < kMaxEpochs, cat("epoch must be 1..", kMaxEpochs - 1));
    out = m;
  } else if (type == "vote") {
    VoteMessage m;
    f.u64("epoch", m.epoch);
    f.opt_bool("pre", m.pre);
    f.opt_bool("granted", m.granted);
    f.str("reason", m.reason, 4096);
    f.opt_str("coordinator", m.coordinator, 64);
    f.check(m.epoch < kMaxEpochs, cat("epoch must be < ", kMaxEpochs));
    if (f.has("standing") && j["standing"].is_object()) {
      const json& sj = j["standing"];
      Fields g(sj, "vote standing");
      Standing& st = m.standing;
      g.u64("committed_round", st.committed_round);
      g.str("anchor_digest", st.anchor_digest);
      g.opt_u64("tokens", st.tokens);
      g.opt_bool("final", st.final);
      g.opt_u64("newest_round", st.newest_round);
      g.opt_u64("newest_attempt", st.newest_attempt);
      if (g.has("committed_attempt")) {
        std::uint64_t a = 0;
        g.u64("committed_attempt", a);
        st.committed_attempt = a;
      }
      g.check(st.committed_round == 0 || is_digest(st.anchor_digest), "anchor_digest must be 16 hex digits");
      g.check(st.newest_attempt <= kMaxAttempt, "newest_attempt must be < 2^32");
      if (sj.contains("pending")) {
        const json& pj = sj["pending"];
        Fields h(pj, "vote pending");
        h.check(pj.is_object(), "pending must be an object");
        if (pj.is_object()) {
          PendingCommit p;
          h.u64("round", p.round);
          h.u64("attempt", p.attempt);
          h.str("anchor_digest", p.anchor_digest);
          h.opt_u64("tokens", p.tokens);
          h.opt_bool("participant", p.participant);
          h.check(is_digest(p.anchor_digest), "anchor_digest must be 16 hex digits");
          h.check(p.attempt <= kMaxAttempt, "attempt must be < 2^32");
          st.pending = p;
        }
        if (!h.status().ok()) return h.status();
      }
      if (!g.status().ok()) return g.status();
    } else {
      f.check(false, "field 'standing' must be an object");
    }
    out = m;
  } else if (type == "round_query") {
    RoundQueryMessage m;
    f.u64("round", m.round);
    f.check(m.round >= 1, "round must be 1 or more");
    out = m;
  } else if (type == "round_outcome") {
    RoundOutcomeMessage m;
    f.u64("round", m.round);
    f.u64("attempt", m.attempt);
    f.str("anchor_digest", m.anchor_digest);
    f.check(m.round >= 1, "round must be 1 or more");
    f.check(m.attempt <= kMaxAttempt, "attempt must be < 2^32");
    f.check(is_digest(m.anchor_digest), "anchor_digest must be 16 hex digits");
    out = m;
  } else {
    return GEOLOCO_ERROR(Err::malformed, "unknown control message type '", type, "'");
  }
  if (!f.status().ok()) return f.status();
  return out;
}

}  // namespace geoloco::daemon
