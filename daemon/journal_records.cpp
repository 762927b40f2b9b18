#include "daemon/journal_records.h"

#include <map>

namespace geoloco::daemon {

namespace {

// Reads optional fields of one record, naming the first of the wrong type.
class Fields {
 public:
  Fields(const nlohmann::json& j, const char* type) : j_(j), type_(type) {}

  template <class T>
  bool take(const char* key, T& out) {
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return false;
    if (!fits<T>(*it)) {
      if (error_.ok())
        error_ = GEOLOCO_ERROR(Err::malformed, "a '", type_, "' record's '", key, "' is ", it->type_name(), ", not ",
                               kind_name<T>());
      return false;
    }
    out = it->get<T>();
    return true;
  }
  template <class T>
  void take(const char* key, std::optional<T>& out) {
    T v{};
    if (take(key, v)) out = v;
  }
  const Status& error() const { return error_; }

 private:
  template <class T>
  static const char* kind_name() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    else if constexpr (std::is_same_v<T, std::uint64_t>) return "an unsigned integer";
    else if constexpr (std::is_same_v<T, double>) return "a number";
    else if constexpr (std::is_same_v<T, std::string>) return "a string";
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "an array of strings";
    else if constexpr (std::is_same_v<T, std::vector<std::uint64_t>>) return "an array of unsigned integers";
    else if constexpr (std::is_same_v<T, std::vector<double>>) return "an array of numbers";
    return "?";
  }
  template <class T>
  static bool fits(const nlohmann::json& v) {
    if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
    else if constexpr (std::is_same_v<T, std::uint64_t>) return is_count(v);
    else if constexpr (std::is_same_v<T, double>) return v.is_number();
    else if constexpr (std::is_same_v<T, std::string>) return v.is_string();
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) return false;
      for (const auto& e : v)
        if (!e.is_string()) return false;
      return true;
    } else if constexpr (std::is_same_v<T, std::vector<std::uint64_t>>) {
      if (!v.is_array()) return false;
      for (const auto& e : v)
        if (!fits<std::uint64_t>(e)) return false;
      return true;
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      if (!v.is_array()) return false;
      for (const auto& e : v)
        if (!e.is_number()) return false;
      return true;
    }
    return false;
  }

  const nlohmann::json& j_;
  const char* type_;
  Status error_;
};

Status check_type(const nlohmann::json& j, const char* type) {
  GEOLOCO_RETURN_IF(!j.is_object(), Err::malformed, "a journal record is ", j.type_name(), ", not an object");
  const auto t = j.find("type");
  GEOLOCO_RETURN_IF(t == j.end() || !t->is_string() || *t != type, Err::malformed, "a journal record is not a '", type,
                    "' record");
  return {};
}

}  // namespace

bool is_count(const nlohmann::json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
}

nlohmann::json to_json(const CommittedRecord& r) {
  nlohmann::json j{{"type", "committed"}, {"round", r.round}, {"anchor_digest", r.anchor_digest}, {"tokens", r.tokens}};
  if (r.final) j["final"] = *r.final;
  if (r.attempt) j["attempt"] = *r.attempt;
  if (r.epoch) j["epoch"] = *r.epoch;
  if (!r.via.empty()) j["via"] = r.via;
  return j;
}

nlohmann::json to_json(const PendingRecord& r) {
  if (r.cleared) return nlohmann::json{{"type", "pending"}, {"none", true}};
  const PendingCommit& c = r.commit;
  nlohmann::json j{{"type", "pending"},
                   {"round", c.round},
                   {"attempt", c.attempt},
                   {"anchor_digest", c.anchor_digest},
                   {"tokens", c.tokens}};
  if (r.plan) {
    const PendingPlan& p = *r.plan;
    j["plan"] = nlohmann::json{
        {"participants", p.participants},   {"late", p.late}, {"weights", p.weights}, {"tokens_each", p.tokens_each},
        {"anchor_rounds", p.anchor_rounds}, {"loss", p.loss}, {"epoch", p.epoch},     {"coordinator", p.coordinator}};
  }
  return j;
}

Result<CommittedRecord> committed_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "committed"));
  CommittedRecord r;
  Fields f(j, "committed");
  f.take("round", r.round);
  f.take("anchor_digest", r.anchor_digest);
  f.take("tokens", r.tokens);
  f.take("final", r.final);
  f.take("attempt", r.attempt);
  f.take("epoch", r.epoch);
  f.take("via", r.via);
  if (!f.error().ok()) return f.error();
  return r;
}

Result<PendingRecord> pending_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "pending"));
  PendingRecord r;
  Fields f(j, "pending");
  f.take("none", r.cleared);
  if (r.cleared) return r;
  f.take("round", r.commit.round);
  f.take("attempt", r.commit.attempt);
  f.take("anchor_digest", r.commit.anchor_digest);
  f.take("tokens", r.commit.tokens);
  if (!f.error().ok()) return f.error();
  const auto plan = j.find("plan");
  GEOLOCO_RETURN_IF(plan != j.end() && !plan->is_null() && !plan->is_object(), Err::malformed,
                    "a 'pending' record's 'plan' is ", plan->type_name(), ", not an object");
  if (plan != j.end() && plan->is_object()) {
    // A plan that does not read is no plan: the site then takes the round's
    // state from a peer instead of stepping it from its round log.
    PendingPlan p;
    Fields g(*plan, "pending");
    const bool whole = g.take("participants", p.participants) && g.take("late", p.late) &&
                       g.take("weights", p.weights) && g.take("tokens_each", p.tokens_each) &&
                       g.take("anchor_rounds", p.anchor_rounds) && g.take("loss", p.loss) && g.take("epoch", p.epoch) &&
                       g.take("coordinator", p.coordinator);
    if (whole && g.error().ok()) r.plan = std::move(p);
  }
  return r;
}

nlohmann::json to_json(const PlanRecord& r) {
  return nlohmann::json{
      {"type", "plan"},       {"round", r.round}, {"attempt", r.attempt}, {"participants", r.participants},
      {"weights", r.weights}, {"late", r.late},   {"epoch", r.epoch}};
}

nlohmann::json to_json(const AbortRecord& r) {
  return nlohmann::json{{"type", "abort"}, {"round", r.round}, {"reason", r.reason}, {"epoch", r.epoch}};
}

nlohmann::json office_record(const Office& r) {
  return nlohmann::json{{"type", "office"}, {"epoch", r.epoch}, {"coordinator", r.coordinator}};
}

nlohmann::json vote_record(const Office& r) {
  return nlohmann::json{{"type", "vote"}, {"epoch", r.epoch}, {"for", r.coordinator}};
}

nlohmann::json to_json(const OfficeStartedRecord& r) {
  return nlohmann::json{{"type", "office_started"}, {"epoch", r.epoch}};
}

Result<PlanRecord> plan_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "plan"));
  PlanRecord r;
  Fields f(j, "plan");
  f.take("round", r.round);
  f.take("attempt", r.attempt);
  f.take("participants", r.participants);
  f.take("weights", r.weights);
  f.take("late", r.late);
  f.take("epoch", r.epoch);
  if (!f.error().ok()) return f.error();
  return r;
}

Result<AbortRecord> abort_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "abort"));
  AbortRecord r;
  Fields f(j, "abort");
  f.take("round", r.round);
  f.take("reason", r.reason);
  f.take("epoch", r.epoch);
  if (!f.error().ok()) return f.error();
  return r;
}

Result<Office> office_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "office"));
  Office r;
  Fields f(j, "office");
  f.take("epoch", r.epoch);
  f.take("coordinator", r.coordinator);
  if (!f.error().ok()) return f.error();
  return r;
}

Result<Office> vote_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "vote"));
  Office r;
  Fields f(j, "vote");
  f.take("epoch", r.epoch);
  f.take("for", r.coordinator);
  if (!f.error().ok()) return f.error();
  return r;
}

Result<OfficeStartedRecord> office_started_record_of(const nlohmann::json& j) {
  GEOLOCO_TRY(check_type(j, "office_started"));
  OfficeStartedRecord r;
  Fields f(j, "office_started");
  f.take("epoch", r.epoch);
  if (!f.error().ok()) return f.error();
  return r;
}

bool known_record_type(const std::string& type, const nlohmann::json& json, Status& check) {
  using Check = Status (*)(const nlohmann::json&);
  static const std::map<std::string, Check> codecs{
      {"committed", [](const nlohmann::json& j) { return committed_record_of(j).status(); }},
      {"pending", [](const nlohmann::json& j) { return pending_record_of(j).status(); }},
      {"plan", [](const nlohmann::json& j) { return plan_record_of(j).status(); }},
      {"abort", [](const nlohmann::json& j) { return abort_record_of(j).status(); }},
      {"office", [](const nlohmann::json& j) { return office_record_of(j).status(); }},
      {"vote", [](const nlohmann::json& j) { return vote_record_of(j).status(); }},
      {"office_started", [](const nlohmann::json& j) { return office_started_record_of(j).status(); }},
  };
  const auto it = codecs.find(type);
  if (it == codecs.end()) return false;
  check = it->second(json);
  return true;
}

}  // namespace geoloco::daemon
