// `geoloco simulate job.yaml`: the whole job in one process (outer/sim/):
// N simulated sites, the real pipeline and outer engine, the network
// replaced by memory and a cost model of the link.
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "compression/pipeline_yaml.h"
#include "outer/job_yaml.h"
#include "outer/sim/simulator.h"

namespace geoloco::cli {

namespace {

struct SimulateArgs {
  std::string job_file;
  int sites = 0;     // 0: the job's site list
  int rounds = 0;    // 0: the job's stop.rounds
  std::string bandwidth = "1G";
  double rtt_ms = 100;
  bool data_parallel = false;
  bool json = false;
  std::string checkpoint;
};

// "100M", "2.5G", "1e9" (bit/s).
Result<double> parse_rate(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  GEOLOCO_RETURN_IF(end == text.c_str() || !(v > 0), Err::invalid_argument, "--bandwidth '", text,
                    "': expected bit/s such as 1e9, 100M or 10G");
  const std::string suffix(end);
  if (suffix == "k" || suffix == "K") v *= 1e3;
  else if (suffix == "M") v *= 1e6;
  else if (suffix == "G") v *= 1e9;
  else GEOLOCO_RETURN_IF(!suffix.empty(), Err::invalid_argument, "--bandwidth '", text, "': unknown suffix '", suffix,
                         "' (k, M or G)");
  return v;
}

Result<outer::sim::SimulationOptions> build(const SimulateArgs& a) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(a.job_file);
  } catch (const YAML::BadFile&) {
    return GEOLOCO_ERROR(Err::io, "cannot read ", a.job_file);
  } catch (const YAML::Exception& e) {
    return GEOLOCO_ERROR(Err::invalid_argument, a.job_file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg);
  }
  outer::sim::SimulationOptions o;
  auto outer_config = outer::parse_outer_job_yaml(doc, a.job_file);
  if (!outer_config.ok()) return outer_config.status();
  GEOLOCO_TRY(outer::sim::apply_job_config(*outer_config, o));
  if (doc["compression"]) {
    auto pipeline = compression::parse_pipeline_yaml(doc["compression"], a.job_file);
    if (!pipeline.ok()) return pipeline.status();
    o.compression = *pipeline;
  }
  if (doc["name"] && doc["name"].IsScalar()) o.job = doc["name"].as<std::string>();
  if (doc["sites"] && doc["sites"].IsSequence()) o.sites = static_cast<std::uint32_t>(doc["sites"].size());
  if (doc["stop"] && doc["stop"]["rounds"] && doc["stop"]["rounds"].IsScalar()) {
    try {
      o.rounds = doc["stop"]["rounds"].as<std::uint64_t>();
    } catch (const YAML::Exception& e) {
      return GEOLOCO_ERROR(Err::invalid_argument, a.job_file, ":", e.mark.line + 1, ":", e.mark.column + 1,
                           ": stop.rounds: expected a whole number");
    }
  }
  if (a.sites > 0) o.sites = static_cast<std::uint32_t>(a.sites);
  if (a.rounds > 0) o.rounds = static_cast<std::uint64_t>(a.rounds);
  auto rate = parse_rate(a.bandwidth);
  if (!rate.ok()) return rate.status();
  o.bandwidth_bits_per_s = *rate;
  o.rtt_ms = a.rtt_ms;
  o.mode = a.data_parallel ? outer::sim::SimulationMode::data_parallel : outer::sim::SimulationMode::diloco;
  o.checkpoint_path = a.checkpoint;
  GEOLOCO_TRY(o.validate());
  return o;
}

void print_round(const outer::sim::RoundReport& r, bool json) {
  std::uint64_t most = 0, total = 0;
  for (auto b : r.bytes_sent) {
    most = std::max(most, b);
    total += b;
  }
  const double ratio = r.payload_bytes > 0 ? double(r.raw_bytes) / r.payload_bytes : 0.0;
  if (json) {
    nlohmann::json j{{"round", r.round},           {"inner_step", r.inner_step},
                     {"loss", r.loss},             {"train_loss", r.train_loss},
                     {"participants", r.participants}, {"bytes_sent_per_site", r.bytes_sent},
                     {"compression_ratio", ratio}, {"exchange_seconds", r.exchange_seconds},
                     {"anchor_digest", r.anchor_digest}, {"notes", r.notes}};
    std::cout << j.dump() << '\n';
    return;
  }
  std::cout << std::setw(6) << r.round << std::setw(8) << r.inner_step << std::setw(13) << std::setprecision(6)
            << r.loss << std::setw(14) << most << std::setw(10) << std::setprecision(3) << ratio << std::setw(12)
            << std::setprecision(4) << r.exchange_seconds << std::setw(6) << r.participants.size() << '\n';
  for (const auto& n : r.notes) std::cout << "       " << n << '\n';
}

}  // namespace

void add_simulate_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<SimulateArgs>();
  auto* sim = app.add_subcommand("simulate",
                                 "Run a job's outer loop with N simulated sites in this process (least-squares "
                                 "trainer, real codecs and outer engine, modelled link)");
  sim->add_option("job", a->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  sim->add_option("--sites", a->sites, "simulated sites (default: the job's site list)");
  sim->add_option("--rounds", a->rounds, "outer rounds (default: the job's stop.rounds, else 20)");
  sim->add_option("--bandwidth", a->bandwidth, "each site's link, bit/s (1e9, 100M, 10G)")->capture_default_str();
  sim->add_option("--rtt", a->rtt_ms, "round-trip time between sites, ms")->capture_default_str();
  sim->add_flag("--data-parallel", a->data_parallel, "synchronous data parallelism instead (the baseline)");
  sim->add_option("--checkpoint", a->checkpoint, "write the outer state here (safetensors) as the job goes");
  sim->add_flag("--json", a->json, "one JSON object per round, then a summary object");
  sim->callback([&action, a] {
    action = [a] {
      auto options = build(*a);
      if (!options.ok()) {
        std::cerr << "geoloco simulate: " << options.status().message() << '\n';
        return 2;
      }
      if (!a->json) {
        std::cout << "simulating '" << options->job << "': " << options->sites << " sites, " << options->rounds
                  << " rounds of H=" << options->inner_steps << ", "
                  << (options->compression ? compression::describe(*options->compression) : std::string("raw fp32"))
                  << ", link " << options->bandwidth_bits_per_s / 1e9 << " Gbit/s, RTT " << options->rtt_ms
                  << " ms\n"
                  << " round    step    eval loss  bytes/site   ratio  exchange s sites\n";
      }
      auto report = outer::sim::simulate(*options);
      if (!report.ok()) {
        std::cerr << "geoloco simulate: " << report.status().message() << '\n';
        return 1;
      }
      for (const auto& r : report->rounds) print_round(r, a->json);
      if (a->json) {
        nlohmann::json j{{"summary", true},
                         {"initial_loss", report->initial_loss},
                         {"final_loss", report->final_loss},
                         {"total_bytes_sent", report->total_bytes_sent},
                         {"total_exchange_seconds", report->total_exchange_seconds},
                         {"anchor_digest", report->anchor_digest}};
        std::cout << j.dump() << '\n';
      } else {
        std::cout << "final eval loss " << report->final_loss << " (from " << report->initial_loss << "), "
                  << report->total_bytes_sent << " bytes sent in all, " << report->total_exchange_seconds
                  << " s of modelled exchange\n";
      }
      return 0;
    };
  });
}

}  // namespace geoloco::cli
