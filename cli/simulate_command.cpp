// `geoloco simulate job.yaml`: the job's whole federation in this process
// (sim/federation.h). Each site's built-in trainer is started from the very
// arguments geolocod would start it with (job/job_trainer.h), read by
// geoloco-train's own parser, and the rounds follow geolocod's rules, so a
// fault-free job ends on the digest a real federation commits. The network
// is a cost model of the link.
#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/units.h"
#include "compression/pipeline_spec.h"
#include "job/job_spec.h"
#include "job/job_trainer.h"
#include "inner/train/train_command.h"
#include "sim/data_parallel.h"
#include "sim/federation.h"

namespace geoloco::cli {

namespace {

struct SimulateArgs {
  std::string job_file;
  int sites = 0;   // 0: the job's site list
  int rounds = 0;  // 0: the job's stop.rounds
  std::string bandwidth = "1G";
  double rtt_ms = 100;
  std::vector<double> step_seconds;  // per site, modelled; empty: 1 s each
  std::uint64_t chunk_elements = 1 << 18;
  bool data_parallel = false;
  bool json = false;
  std::vector<std::uint64_t> residual_lost_after;
};

// A scratch folder for the coordinator's eval log, removed on exit.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "geoloco-simulate-XXXXXX").string();
    if (::mkdtemp(t.data()) != nullptr) path = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// The job, with --sites and --rounds applied. Site names beyond the job's
// are site-1, site-2, … (the data is cut into as many shards as sites).
Result<job::JobSpec> load_job(const SimulateArgs& a) {
  auto spec = job::load_job_file(a.job_file);
  if (!spec.ok()) return spec.status();
  GEOLOCO_RETURN_IF(spec->trainer.kind != job::TrainerSpec::Kind::builtin, Err::invalid_argument, a.job_file,
                    ": the job's trainer is external; geoloco simulate runs the built-in one (trainer: {kind: "
                    "builtin, model: mlp|gpt})");
  if (a.sites > 0) {
    spec->sites.clear();
    for (int i = 1; i <= a.sites; ++i) spec->sites.push_back(cat("site-", i));
    spec->coordinator = spec->sites.front();
  }
  if (a.rounds > 0) spec->stop_rounds = static_cast<std::uint64_t>(a.rounds);
  GEOLOCO_RETURN_IF(!spec->stop_rounds, Err::invalid_argument, a.job_file,
                    ": the job stops by tokens; give the rounds to simulate with --rounds");
  return spec;
}

// Site `site`'s trainer command: geolocod's arguments, geoloco-train's parser.
Result<inner::TrainCommand> trainer_command(const job::JobSpec& spec, const std::string& site, const std::string& dir) {
  job::TrainerPaths paths;
  paths.job_dir = dir;
  auto args = job::builtin_trainer_options(spec, site, paths);
  if (!args.ok()) return args.status();
  std::ostringstream out, err;
  const std::string socket = (std::filesystem::path(dir) / "sync.sock").string(), job = spec.name;
  auto parsed = inner::parse_train_command(
      job::trainer_arguments(*args),
      [&](const char* name) -> const char* {
        if (std::string_view(name) == "GEOLOCO_SOCKET") return socket.c_str();
        if (std::string_view(name) == "GEOLOCO_JOB") return job.c_str();
        return nullptr;
      },
      out, err);
  GEOLOCO_RETURN_IF(!parsed.command, Err::internal, "site ", site, "'s trainer arguments do not parse: ", err.str());
  return std::move(*parsed.command);
}

void print_round(const sim::RoundReport& r, std::uint32_t fragments) {
  std::uint64_t most = 0;
  for (auto b : r.bytes_sent) most = std::max(most, b);
  const double ratio = r.payload_bytes > 0 ? double(r.raw_bytes) / double(r.payload_bytes) : 0.0;
  const std::string round = fragments > 1 ? cat(r.round, ":f", r.fragment) : cat(r.round);
  std::cout << std::setw(8) << round << std::setw(7) << r.participants.size() << std::setw(12) << std::fixed
            << std::setprecision(4) << r.train_loss << std::setw(14) << most << std::setw(9) << std::setprecision(1)
            << ratio << "x" << std::setw(11) << std::setprecision(3) << r.exchange_seconds << "  " << r.anchor_digest
            << std::endl;
}

int run_federation(const SimulateArgs& a, const job::JobSpec& spec, double bandwidth) {
  ScratchDir dir;
  if (dir.path.empty()) {
    std::cerr << "geoloco simulate: cannot make a scratch folder in " << std::filesystem::temp_directory_path() << "\n";
    return 1;
  }
  sim::FederationOptions o;
  o.job = spec.name;
  o.coordinator = spec.coordinator;
  o.rounds = *spec.last_round();
  o.fragments = spec.fragments();
  o.inner_steps = spec.outer.inner.steps;
  o.outer = spec.outer.outer;
  o.weighting = spec.outer.weighting;
  o.straggler = spec.outer.straggler;
  o.pipeline = spec.compression;
  o.seed = spec.seed;
  o.chunk_elements = a.chunk_elements;
  o.bandwidth_bits_per_s = bandwidth;
  o.rtt_ms = a.rtt_ms;
  o.eval_log = (dir.path / "eval.jsonl").string();
  o.residual_lost_after = a.residual_lost_after;
  if (!a.step_seconds.empty() && a.step_seconds.size() != spec.sites.size()) {
    std::cerr << "geoloco simulate: --step-seconds gives " << a.step_seconds.size() << " times for "
              << spec.sites.size() << " sites; give one per site\n";
    return 2;
  }
  for (std::size_t i = 0; i < spec.sites.size(); ++i) {
    auto command = trainer_command(spec, spec.sites[i], dir.path.string());
    if (!command.ok()) {
      std::cerr << "geoloco simulate: " << command.status().message() << "\n";
      return 2;
    }
    o.sites.push_back({spec.sites[i], std::move(*command), a.step_seconds.empty() ? 1.0 : a.step_seconds[i]});
  }
  if (!a.json)
    std::cout << "simulating '" << spec.name << "': " << spec.sites.size() << " sites, " << o.rounds << " rounds"
              << (o.fragments > 1 ? cat(" (", *spec.stop_rounds, " periods of ", o.fragments, " fragments)") : "")
              << " of H=" << o.inner_steps << ", " << spec.trainer.model << ", " << compression::describe(o.pipeline)
              << ", link " << bandwidth / 1e9 << " Gbit/s, RTT " << a.rtt_ms << " ms"
              << (a.residual_lost_after.empty()
                      ? std::string()
                      : cat(", residuals emptied after ", a.residual_lost_after.size(), " round(s)"))
              << "\n"
              << "   round  sites  train loss  bytes/site     ratio exchange s  anchor\n";
  auto report = sim::run_federation(o, [&](const sim::RoundReport& r) {
    if (!a.json) print_round(r, o.fragments);
  });
  if (!report.ok()) {
    std::cerr << "geoloco simulate: " << report.status().message() << "\n";
    return 1;
  }
  auto eval = [&](std::uint64_t after) -> nlohmann::json {
    auto it = report->eval_loss.find(after);
    return it == report->eval_loss.end() ? nlohmann::json(nullptr) : nlohmann::json(it->second);
  };
  auto accuracy = [&](std::uint64_t after) -> nlohmann::json {  // null for gpt
    auto it = report->accuracy.find(after);
    return it == report->accuracy.end() ? nlohmann::json(nullptr) : nlohmann::json(it->second);
  };
  if (a.json) {
    for (const auto& r : report->rounds)
      std::cout << nlohmann::json{{"round", r.round},
                                  {"fragment", r.fragment},
                                  {"participants", r.participants},
                                  {"weights", r.weights},
                                  {"tokens", r.tokens},
                                  {"train_loss", r.train_loss},
                                  {"eval_loss", eval(r.round)},
                                  {"accuracy", accuracy(r.round)},
                                  {"bytes_sent", r.bytes_sent},
                                  {"payload_bytes", r.payload_bytes},
                                  {"raw_bytes", r.raw_bytes},
                                  {"exchange_seconds", r.exchange_seconds},
                                  {"anchor_digest", r.anchor_digest}}
                       .dump()
                << "\n";
    std::cout << nlohmann::json{{"summary", true},
                                {"parameters", report->parameters},
                                {"rounds", report->rounds.size()},
                                {"initial_eval_loss", eval(0)},
                                {"final_eval_loss", eval(report->rounds.size())},
                                {"final_accuracy", accuracy(report->rounds.size())},
                                {"total_bytes_sent", report->total_bytes_sent},
                                {"total_exchange_seconds", report->total_exchange_seconds},
                                {"initial_digest", report->initial_digest},
                                {"anchor_digest", report->anchor_digest}}
                     .dump()
              << "\n";
  } else {
    std::cout << "eval loss " << eval(0).dump() << " (the initialization) -> " << eval(report->rounds.size()).dump()
              << " (the final anchor); " << report->total_bytes_sent << " bytes sent in all, "
              << report->total_exchange_seconds << " s of modelled exchange; final anchor " << report->anchor_digest
              << "\n";
  }
  return 0;
}

int run_data_parallel(const SimulateArgs& a, const job::JobSpec& spec, double bandwidth) {
  ScratchDir dir;
  auto command = trainer_command(spec, spec.sites.front(), dir.path.string());
  if (!command.ok()) {
    std::cerr << "geoloco simulate: " << command.status().message() << "\n";
    return 2;
  }
  sim::DataParallelOptions o;
  o.command = std::move(*command);
  o.sites = static_cast<std::uint32_t>(spec.sites.size());
  o.rounds = *spec.stop_rounds;
  o.steps_per_round = spec.outer.inner.steps;
  o.bandwidth_bits_per_s = bandwidth;
  o.rtt_ms = a.rtt_ms;
  if (!a.json)
    std::cout << "data parallel baseline of '" << spec.name << "': " << o.sites << " sites' batches every step, "
              << o.rounds << " x " << o.steps_per_round << " steps, fp32 gradients all-reduced every step\n"
              << "   round   eval loss  bytes/site (computed)  exchange s\n";
  auto report = sim::run_data_parallel(o, [&](const sim::DataParallelRound& r) {
    if (a.json)
      std::cout << nlohmann::json{{"round", r.round},
                                  {"eval_loss", r.eval_loss},
                                  {"accuracy", r.accuracy >= 0 ? nlohmann::json(r.accuracy) : nlohmann::json(nullptr)},
                                  {"bytes_per_site", r.bytes_per_site},
                                  {"exchange_seconds", r.exchange_seconds}}
                       .dump()
                << "\n";
    else
      std::cout << std::setw(8) << r.round << std::setw(12) << std::fixed << std::setprecision(4) << r.eval_loss
                << std::setw(23) << r.bytes_per_site << std::setw(12) << std::setprecision(3) << r.exchange_seconds
                << std::endl;
  });
  if (!report.ok()) {
    std::cerr << "geoloco simulate: " << report.status().message() << "\n";
    return 1;
  }
  if (a.json)
    std::cout
        << nlohmann::json{{"summary", true}, {"parameters", report->parameters}, {"digest", report->digest}}.dump()
        << "\n";
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<SimulateArgs>();
  auto* sim = app.add_subcommand("simulate",
                                 "Run a job's federation in this process: its built-in trainer on every site, "
                                 "geolocod's rounds and arithmetic, a modelled link");
  sim->add_option("job", a->job_file, "job file (YAML)")->required()->check(CLI::ExistingFile);
  sim->add_option("--sites", a->sites, "simulated sites, named site-1, site-2, ... (default: the job's sites)");
  sim->add_option("--rounds", a->rounds, "periods of H inner steps (default: the job's stop.rounds)");
  sim->add_option("--bandwidth", a->bandwidth, "each site's link in bit/s, with k, M, G or T (1e9, 100M, 10G)")
      ->capture_default_str();
  sim->add_option("--rtt", a->rtt_ms, "round-trip time between sites, ms")->capture_default_str();
  sim->add_option("--step-seconds", a->step_seconds,
                  "modelled seconds per inner step of each site, in the job's order (time-based phases)");
  sim->add_option("--chunk-elements", a->chunk_elements, "the sites' transport.chunk_elements")->capture_default_str();
  sim->add_option("--lose-residual-after", a->residual_lost_after,
                  "empty every site's error-feedback residual after these rounds (comma-separated), as a crash of "
                  "every site rebuilt from the round log does: its cost in loss")
      ->delimiter(',');
  sim->add_flag("--data-parallel", a->data_parallel, "synchronous data parallelism instead (the baseline)");
  sim->add_flag("--json", a->json, "one JSON object per round, then a summary object");
  sim->callback([&action, a] {
    action = [a] {
      auto spec = load_job(*a);
      if (!spec.ok()) {
        std::cerr << "geoloco simulate: " << spec.status().message() << '\n';
        return 2;
      }
      auto bandwidth = parse_rate(a->bandwidth);
      if (!bandwidth.ok()) {
        std::cerr << "geoloco simulate: --bandwidth: " << bandwidth.status().message() << '\n';
        return 2;
      }
      if (a->data_parallel && !a->residual_lost_after.empty()) {
        std::cerr << "geoloco simulate: --lose-residual-after is DiLoCo's error feedback; --data-parallel has none\n";
        return 2;
      }
      return a->data_parallel ? run_data_parallel(*a, *spec, *bandwidth) : run_federation(*a, *spec, *bandwidth);
    };
  });
}

}  // namespace geoloco::cli
