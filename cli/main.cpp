// geoloco: the operator's command line. Each subcommand lives in its own
// file; main only parses and runs the chosen one.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string_view>

#include "cli/commands.h"
#include "common/buffer.h"

int main(int argc, char** argv) {
  geoloco::keep_freed_memory_for_reuse();
  CLI::App app{"geoloco: train one model across datacenters with DiLoCo"};
  app.require_subcommand(1);
  geoloco::cli::Action action;
  geoloco::cli::add_bench_command(app, action);
  geoloco::cli::add_certs_command(app, action);
  geoloco::cli::add_simulate_command(app, action);
  geoloco::cli::add_plan_command(app, action);
  geoloco::cli::add_check_history_command(app, action);
  geoloco::cli::add_job_commands(app, action);
  // A first word that is no command: say so plainly (CLI11 would only say
  // that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::cerr << "geoloco: unknown command '" << argv[1] << "'; the commands are bench, certs, simulate, "
                << "plan, check-history, submit, status, watch and cancel (geoloco --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any other command line CLI11 rejects is a usage error:
    // 2, as scripts expect, not CLI11's own 1xx codes.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return action ? action() : 0;
}
