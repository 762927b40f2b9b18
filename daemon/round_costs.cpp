#include "daemon/round_costs.h"

namespace geoloco::daemon {

const std::array<CostStage, 10> kCostStages{{
    {"encode", &RoundCosts::encode},
    {"transfer", &RoundCosts::transfer},
    {"decode_average", &RoundCosts::decode_average},
    {"clip", &RoundCosts::clip},
    {"digest", &RoundCosts::digest},
    {"round_log", &RoundCosts::round_log},
    {"feedback", &RoundCosts::feedback},
    {"outer_step", &RoundCosts::outer_step},
    {"history", &RoundCosts::history},
    {"checkpoint", &RoundCosts::checkpoint},
}};

double RoundCosts::cpu_seconds() const {
  double total = 0;
  for (const auto& stage : kCostStages) total += this->*stage.seconds;
  return total;
}

double RoundCosts::decodes_per_chunk() const {
  return values == 0 ? 0.0 : static_cast<double>(averaged_values_decoded) / static_cast<double>(values);
}

double RoundCosts::encodes_per_chunk() const {
  return own_values == 0 ? 0.0 : static_cast<double>(values_encoded) / static_cast<double>(own_values);
}

nlohmann::json costs_json(const RoundCosts& c) {
  nlohmann::json cpu = nlohmann::json::object();
  for (const auto& stage : kCostStages) cpu[std::string(stage.name)] = c.*stage.seconds;
  cpu["total"] = c.cpu_seconds();
  return {
      {"cpu_seconds", cpu},
      {"decodes_per_chunk", c.decodes_per_chunk()},
      {"encodes_per_chunk", c.encodes_per_chunk()},
      {"values", c.values},
      {"round_log_seconds", c.round_log_seconds},
      {"round_log_wait_seconds", c.round_log_wait_seconds},
      {"checkpoint_wait_seconds", c.checkpoint_wait_seconds},
      {"loop_busy_seconds", c.loop_busy_seconds},
      {"checkpoint_seconds", c.checkpoint_seconds ? nlohmann::json(*c.checkpoint_seconds) : nlohmann::json(nullptr)},
      {"checkpoint_bytes", c.checkpoint_bytes}};
}

}  // namespace geoloco::daemon
