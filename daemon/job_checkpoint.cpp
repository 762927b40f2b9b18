// A job's checkpoints (job_run.h): written in the background between rounds
// from the state where it lies, or at once where the caller needs the file
// (the job's first anchor, its end, a state offered when none is on disk).
// A checkpoint only bounds how much of the round log a restart replays:
// nothing a commit depends on waits for it.
#include <asio/post.hpp>
#include <chrono>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "common/cpu_time.h"
#include "common/thread_name.h"
#include "daemon/job_run.h"
#include "daemon/site_checkpoint.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;

Status JobRun::save_checkpoint() {
  finish_checkpoint();
  if (state_.job.empty()) state_.job = spec_.name;
  // The checkpoint keeps no rounding of a round that was not kept; a round
  // still in hand keeps its own (it may commit with this site's Δ).
  if (!round_in_hand()) drop_spent_residual();
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  Status saved =
      save_site_checkpoint(fs::path(dir_) / "checkpoint.safetensors", state_, feedback_.get(), self(), config_hash_);
  after_checkpoint(saved, state_.round, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   thread_cpu_seconds() - cpu_start);
  return saved;
}

void JobRun::start_checkpoint() {
  if (state_.anchor.empty()) return;
  if (checkpoint_write_) {
    if (checkpoints_skipped_++ == 0)
      spdlog::warn(
          "[{}] the checkpoint of round {} is still being written: round {}'s is skipped (the round log "
          "keeps its rounds); said once",
          spec_.name, checkpoint_write_->round, state_.round);
    return;
  }
  if (state_.job.empty()) state_.job = spec_.name;
  if (!round_in_hand()) drop_spent_residual();
  auto write = std::make_unique<CheckpointWrite>();
  write->round = state_.round;
  CheckpointWrite* w = write.get();
  std::weak_ptr<JobRun> weak = weak_from_this();
  // Views: valid until finish_checkpoint(), which everything that changes
  // the state calls (or waits for) first.
  w->thread =
      std::thread([w, weak, source = site_checkpoint_source(state_, feedback_.get(), self()),
                   path = fs::path(dir_) / "checkpoint.safetensors", hash = config_hash_, executor = env_.executor]() {
        name_this_thread("geoloco-ckpt");
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = thread_cpu_seconds();
        w->status = outer::save_checkpoint(path, source, hash);
        w->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        w->cpu_seconds = thread_cpu_seconds() - cpu_start;
        asio::post(executor, [weak]() {
          if (auto job = weak.lock()) job->finish_checkpoint();
        });
      });
  checkpoint_write_ = std::move(write);
}

void JobRun::finish_checkpoint() {
  if (!checkpoint_write_) return;
  std::unique_ptr<CheckpointWrite> w = std::move(checkpoint_write_);
  w->thread.join();
  if (!w->status.ok()) spdlog::error("[{}] checkpoint of round {}: {}", spec_.name, w->round, w->status.message());
  after_checkpoint(w->status, w->round, w->seconds, w->cpu_seconds);
  checkpoints_skipped_ = 0;
  changed_.notify_all();
}

asio::awaitable<double> JobRun::checkpoint_written() {
  if (!checkpoint_write_) co_return 0.0;
  const auto start = std::chrono::steady_clock::now();
  while (checkpoint_write_) co_await changed_.wait();
  co_return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void JobRun::after_checkpoint(const Status& saved, std::uint64_t round, double seconds, double cpu) {
  if (!saved.ok() || state_.anchor.empty()) return;
  const fs::path path = fs::path(dir_) / "checkpoint.safetensors";
  checkpoint_checked_ = FileIdentity::of(path);  // written here from the digests of the state in memory
  // What it cost, shown with the round it holds (round_costs.h).
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  const auto& records = rounds_->records();
  if (!records.empty() && records.back().round == round && records.back().costs) {
    RoundCosts costs = *records.back().costs;
    costs.checkpoint = cpu;
    costs.checkpoint_seconds = seconds;
    costs.checkpoint_bytes = ec ? 0 : bytes;
    rounds_->set_costs(round, costs);
  }
  if (env_.metrics) {
    const Labels stage{{"job", spec_.name}, {"stage", "checkpoint"}};
    (void)env_.metrics->set("geoloco_round_cpu_seconds", stage, cpu);
    (void)env_.metrics->add("geoloco_round_cpu_seconds_total", stage, cpu);
    (void)env_.metrics->set("geoloco_checkpoint_seconds", {{"job", spec_.name}}, seconds);
    (void)env_.metrics->set("geoloco_checkpoint_round", {{"job", spec_.name}}, double(round));
  }
  mapped_checkpoint_.reset();  // a new file: the next transfer maps it
  // Offers of the last interval stay answerable: a joining site may still
  // widen a holder's share of one (another holder stopped).
  const std::uint64_t interval = spec_.checkpoint_every();
  if (transfers_ && round > interval) transfers_->forget_offers_before(round - interval);
  note(ec || seconds <= 0 ? cat("checkpoint of round ", round, " saved")
                          : fmt::format("checkpoint of round {} saved: {:.1f} MB in {:.2f} s, {:.0f} MB/s", round,
                                        double(bytes) / 1e6, seconds, double(bytes) / seconds / 1e6));
  // The checkpoint holds these rounds now: the log only has to reach past
  // it to rebuild this site, but keeps one more checkpoint interval for
  // peers that fell behind by less than that (state_source.h).
  if (round_deltas_ && round > interval)
    if (Status cut = round_deltas_->cut_through(round - interval); !cut.ok())
      spdlog::warn("[{}] the round log keeps rounds the checkpoint holds: {}", spec_.name, cut.message());
  show_round_log_bytes();
}

}  // namespace geoloco::daemon
