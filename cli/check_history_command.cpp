// `geoloco check-history DIR... [--down SITE]...`: reads each site's job
// folder (its history.jsonl and its journal, which every site keeps; the
// job's sites from the first folder's job.yaml), checks
// the promises history/check.h lists, prints what it saw, and exits 0 when
// all hold, 1 naming the first that breaks, 2 when a folder cannot be read.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "history/check.h"
#include "history/history_file.h"
#include "job/job_spec.h"

namespace geoloco::cli {

namespace fs = std::filesystem;

namespace {
struct CheckArgs {
  std::vector<std::string> dirs;
  std::vector<std::string> down;
};

int run_check(const CheckArgs& a) {
  history::CheckInput in;
  in.allowed_down.insert(a.down.begin(), a.down.end());
  for (const auto& dir : a.dirs) {
    const fs::path file = fs::path(dir) / history::kHistoryFile;
    auto read = history::read_history(file.string());
    if (!read.ok()) {
      std::cerr << "geoloco check-history: " << read.status().message() << '\n';
      return 2;
    }
    in.sites.push_back({file.string(), std::move(read->records), read->torn_tail});
    if (const fs::path journal = fs::path(dir) / "journal"; fs::exists(journal)) {
      auto commits = history::read_journal_commits(journal.string());
      if (!commits.ok()) {
        std::cerr << "geoloco check-history: " << commits.status().message() << '\n';
        return 2;
      }
      in.journal.insert(in.journal.end(), commits->begin(), commits->end());
    }
  }
  // The job's sites, from the first folder's job.yaml: none may be left out unnoticed.
  if (const fs::path yaml = fs::path(a.dirs.front()) / "job.yaml"; fs::exists(yaml)) {
    auto spec = job::load_job_file(yaml.string());
    if (!spec.ok()) {
      std::cerr << "geoloco check-history: " << spec.status().message() << '\n';
      return 2;
    }
    in.job_sites = spec->sites;
  }
  const auto result = history::check_history(in);
  std::cout << history::summary_text(result.summary);
  if (!result.ok()) {
    std::cout << "VIOLATION: " << result.violation << '\n';
    return 1;
  }
  std::cout << "OK: " << result.summary.rounds << " rounds, one digest each on " << result.summary.sites
            << " sites, every reported token accounted for\n";
  return 0;
}
}  // namespace

void add_check_history_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("check-history",
                                 "Check a job's site histories: one digest per round, no round lost or applied "
                                 "twice, every site at the end, every token accounted for");
  auto args = std::make_shared<CheckArgs>();
  cmd->add_option("dirs", args->dirs, "each site's job folder (<data_dir>/jobs/<job>)")->required();
  cmd->add_option("--down", args->down, "a site that need not be running at the end (repeatable)");
  cmd->callback([&action, args] { action = [args] { return run_check(*args); }; });
}

}  // namespace geoloco::cli
