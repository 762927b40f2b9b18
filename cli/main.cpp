// geoloco: the operator's command line (DESIGN §2). Each subcommand lives in
// its own file; main only parses and runs the chosen one.
#include <CLI/CLI.hpp>

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
  CLI11_PARSE(app, argc, argv);
  return action ? action() : 0;
}
