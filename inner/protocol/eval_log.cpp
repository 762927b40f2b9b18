#include "inner/protocol/eval_log.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace geoloco::inner {

EvalHistory read_eval_log(const std::string& path) {
  EvalHistory h;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("round") || !j["round"].is_number_unsigned()) continue;
    const auto round = j["round"].get<std::uint64_t>();
    if (!j.contains("eval_loss") || !j["eval_loss"].is_number()) continue;  // not finite: nothing to show
    h.loss[round] = j["eval_loss"].get<double>();
    if (j.contains("accuracy") && j["accuracy"].is_number()) h.accuracy[round] = j["accuracy"].get<double>();
    else h.accuracy.erase(round);
  }
  return h;
}

}  // namespace geoloco::inner
