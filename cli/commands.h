// The `geoloco` command line: each subcommand registers itself on the CLI11
// app and returns the process exit code when it runs. A command line CLI11
// rejects exits 2 (main.cpp), as job_output.h's kExitUsage.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace geoloco::cli {

/// What main() runs after parsing: the chosen subcommand's body.
using Action = std::function<int()>;

/// `geoloco bench codecs|allreduce ...`.
void add_bench_command(CLI::App& app, Action& action);
/// `geoloco certs init --out DIR` and `geoloco certs issue --ca DIR --site NAME --out DIR`.
void add_certs_command(CLI::App& app, Action& action);
/// `geoloco simulate job.yaml [--sites N] [--rounds R] [--bandwidth B] [--rtt MS] [--json]`.
void add_simulate_command(CLI::App& app, Action& action);
/// `geoloco plan --params P --step-seconds S --sites K [--bandwidth B] [--rtt MS] [--h H] ...`
/// (plan_command.cpp, planner/plan.h).
void add_plan_command(CLI::App& app, Action& action);
/// `geoloco check-history DIR... [--down SITE]...` (check_history_command.cpp).
void add_check_history_command(CLI::App& app, Action& action);
/// `geoloco submit job.yaml`, `status [JOB] [--json]`, `watch JOB`, `cancel JOB`:
/// requests to the local geolocod, each with `--socket PATH` (job_commands.cpp).
void add_job_commands(CLI::App& app, Action& action);

}  // namespace geoloco::cli
