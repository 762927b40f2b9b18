#include "history/events.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/overload.h"

namespace geoloco::history {

using json = nlohmann::json;

namespace {

// Reads one record's fields; the first problem is kept and named.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}
  std::uint64_t u64(const char* key) {
    const json* v = find(key);
    if (v && !v->is_number_unsigned()) fail(key, "a non-negative integer");
    return v && v->is_number_unsigned() ? v->get<std::uint64_t>() : 0;
  }
  /// Absent: 0 (histories written before the field existed).
  std::uint64_t opt_u64(const char* key) { return j_.contains(key) ? u64(key) : 0; }
  std::int64_t i64(const char* key) {
    const json* v = find(key);
    if (v && !v->is_number_integer()) fail(key, "an integer");
    return v && v->is_number_integer() ? v->get<std::int64_t>() : 0;
  }
  double f64(const json& v, const char* key) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(key, "a finite number");
    return v.is_number() ? v.get<double>() : 0.0;
  }
  bool boolean(const char* key) {
    const json* v = find(key);
    if (v && !v->is_boolean()) fail(key, "true or false");
    return v && v->is_boolean() && v->get<bool>();
  }
  std::string str(const char* key) {
    const json* v = find(key);
    if (v && !v->is_string()) fail(key, "a string");
    return v && v->is_string() ? v->get<std::string>() : std::string();
  }
  std::vector<std::string> names(const char* key) {
    std::vector<std::string> out;
    const json* v = find(key);
    if (!v) return out;
    if (!v->is_array()) {
      fail(key, "a list of site names");
      return out;
    }
    for (const auto& e : *v) {
      if (!e.is_string() || e.get_ref<const std::string&>().empty()) {
        fail(key, "a list of site names");
        return {};
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  std::vector<Contribution> contributions(const char* key) {
    std::vector<Contribution> out;
    const json* v = find(key);
    if (!v) return out;
    if (!v->is_array()) {
      fail(key, "a list of {site, anchor_round, tokens, weight}");
      return out;
    }
    for (const auto& e : *v) {
      if (!e.is_object() || !e.contains("site") || !e["site"].is_string() || !e.contains("anchor_round") ||
          !e["anchor_round"].is_number_unsigned() || !e.contains("tokens") || !e["tokens"].is_number_unsigned() ||
          !e.contains("weight")) {
        fail(key, "a list of {site, anchor_round, tokens, weight}");
        return {};
      }
      out.push_back({e["site"].get<std::string>(), e["anchor_round"].get<std::uint64_t>(),
                     e["tokens"].get<std::uint64_t>(), f64(e["weight"], key)});
    }
    return out;
  }
  /// Absent: none (histories written before the field existed).
  std::vector<RoundDigest> round_digests(const char* key) {
    std::vector<RoundDigest> out;
    if (!j_.contains(key)) return out;
    const json& v = j_[key];
    if (!v.is_array()) {
      fail(key, "a list of {round, digest}");
      return out;
    }
    for (const auto& e : v) {
      if (!e.is_object() || !e.contains("round") || !e["round"].is_number_unsigned() || !e.contains("digest") ||
          !e["digest"].is_string()) {
        fail(key, "a list of {round, digest}");
        return {};
      }
      out.push_back({e["round"].get<std::uint64_t>(), e["digest"].get<std::string>()});
    }
    return out;
  }
  void check(bool ok, const std::string& what) {
    if (!ok && status_.ok()) status_ = Status(Err::malformed, what);
  }
  const Status& status() const { return status_; }

 private:
  const json* find(const char* key) {
    auto it = j_.find(key);
    if (it != j_.end()) return &*it;
    check(false, cat("no field '", key, "'"));
    return nullptr;
  }
  void fail(const char* key, const char* expected) { check(false, cat("field '", key, "' must be ", expected)); }
  const json& j_;
  Status status_;
};

Result<Event> parse_event(const std::string& name, Reader& f) {
  if (name == "started") {
    Started e{f.str("site"), f.u64("round"), f.str("digest"), f.str("from"), f.round_digests("rebuilt")};
    for (std::size_t i = 0; i < e.rebuilt.size(); ++i)
      f.check(e.rebuilt[i].round == e.round - (e.rebuilt.size() - 1 - i),
              "rebuilt must list consecutive rounds ending at round");
    return Event(e);
  }
  if (name == "trainer_tokens") {
    TrainerTokens e{f.u64("round"), static_cast<std::uint32_t>(f.u64("fragment")), f.u64("tokens")};
    return Event(e);
  }
  if (name == "committed") {
    Committed c;
    c.round = f.u64("round");
    c.attempt = f.u64("attempt");
    c.fragment = static_cast<std::uint32_t>(f.u64("fragment"));
    c.coordinator = f.str("coordinator");
    c.epoch = f.opt_u64("epoch");
    c.participants = f.names("participants");
    c.late = f.names("late");
    c.contributions = f.contributions("contributions");
    c.digest = f.str("digest");
    c.final = f.boolean("final");
    f.check(c.contributions.size() == c.participants.size(), "one contribution per participant");
    for (std::size_t i = 0; i < c.contributions.size() && i < c.participants.size(); ++i)
      f.check(c.contributions[i].site == c.participants[i], "contributions in the participants' order");
    return Event(c);
  }
  if (name == "state_sync_applied") return Event(StateSyncApplied{f.u64("round"), f.str("digest"), f.str("from")});
  if (name == "dropped") return Event(Dropped{f.u64("round"), f.str("site"), f.u64("tokens"), f.str("reason")});
  if (name == "aborted") return Event(Aborted{f.u64("round"), f.u64("attempt"), f.str("reason")});
  if (name == "ended") return Event(Ended{f.str("state"), f.u64("round"), f.str("digest"), f.str("reason")});
  return GEOLOCO_ERROR(Err::malformed, "unknown event '", name, "'");
}

}  // namespace

std::string_view event_name(const Event& event) {
  return std::visit(
      Overload{[](const Started&) { return "started"; }, [](const TrainerTokens&) { return "trainer_tokens"; },
               [](const Committed&) { return "committed"; },
               [](const StateSyncApplied&) { return "state_sync_applied"; }, [](const Dropped&) { return "dropped"; },
               [](const Aborted&) { return "aborted"; }, [](const Ended&) { return "ended"; }},
      event);
}

std::string encode_record(const Record& record) {
  json j = std::visit(
      Overload{
          [](const Started& e) {
            json j{{"site", e.site}, {"round", e.round}, {"digest", e.digest}, {"from", e.from}};
            if (!e.rebuilt.empty()) {
              j["rebuilt"] = json::array();
              for (const auto& r : e.rebuilt) j["rebuilt"].push_back({{"round", r.round}, {"digest", r.digest}});
            }
            return j;
          },
          [](const TrainerTokens& e) {
            return json{{"round", e.round}, {"fragment", e.fragment}, {"tokens", e.tokens}};
          },
          [](const Committed& e) {
            json contributions = json::array();
            for (const auto& c : e.contributions)
              contributions.push_back(
                  {{"site", c.site}, {"anchor_round", c.anchor_round}, {"tokens", c.tokens}, {"weight", c.weight}});
            return json{{"round", e.round},       {"attempt", e.attempt},
                        {"fragment", e.fragment}, {"coordinator", e.coordinator},
                        {"epoch", e.epoch},       {"participants", e.participants},
                        {"late", e.late},         {"contributions", contributions},
                        {"digest", e.digest},     {"final", e.final}};
          },
          [](const StateSyncApplied& e) {
            return json{{"round", e.round}, {"digest", e.digest}, {"from", e.from}};
          },
          [](const Dropped& e) {
            return json{{"round", e.round}, {"site", e.site}, {"tokens", e.tokens}, {"reason", e.reason}};
          },
          [](const Aborted& e) {
            return json{{"round", e.round}, {"attempt", e.attempt}, {"reason", e.reason}};
          },
          [](const Ended& e) {
            return json{{"state", e.state}, {"round", e.round}, {"digest", e.digest}, {"reason", e.reason}};
          }},
      record.event);
  j["t"] = record.t_ms;
  j["event"] = std::string(event_name(record.event));
  return j.dump();
}

Result<Record> parse_record(std::string_view line) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  GEOLOCO_RETURN_IF(j.is_discarded() || !j.is_object(), Err::malformed, "not a JSON object");
  Reader f(j);
  Record r;
  r.t_ms = f.i64("t");
  const std::string name = f.str("event");
  GEOLOCO_TRY(f.status());
  auto event = parse_event(name, f);
  if (!event.ok()) return event.status();
  GEOLOCO_RETURN_IF(!f.status().ok(), Err::malformed, name, ": ", f.status().message());
  r.event = std::move(*event);
  return r;
}

}  // namespace geoloco::history
