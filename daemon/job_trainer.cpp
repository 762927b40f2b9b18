// The job's trainer, wired to the round engine: the trainer host (the sync
// protocol's daemon side, with the job's phase plan), the trainer process
// geolocod starts for a builtin or command trainer, and the loop that hands
// each phase the trainer reports to the participant machine.
#include <algorithm>

#include "common/layout.h"
#include "daemon/job_run.h"
#include "daemon/phase_plan.h"
#include "diloco/straggler.h"
#include "job/job_trainer.h"

namespace geoloco::daemon {

using Clock = std::chrono::steady_clock;

Status JobRun::start_trainer(std::uint64_t first_round, bool ask_for_initial) {
  TrainerHostOptions h;
  h.socket_path = job::sync_socket_path(dir_);
  h.job = spec_.name;
  h.fragments = spec_.fragments();
  h.streaming = streaming();
  h.first_round = first_round;
  h.anchor_view = [this] { return trainer_anchor(); };  // no second copy of the model in the host
  h.plan = phase_plan_of(spec_);
  // A checkpoint's layout is the job's (its first trainer's): later trainers must match it.
  if (!state_.anchor.empty() && state_.layout != layout_for(state_.anchor.size())) h.expected_layout = state_.layout;
  h.ask_for_initial = ask_for_initial;
  auto host = TrainerHost::open(env_.executor, h);
  if (!host.ok()) return host.status();
  host_ = std::move(*host);
  if (spec_.trainer.kind == job::TrainerSpec::Kind::external) return {};

  job::TrainerPaths paths;
  paths.program = env_.trainer_program;
  paths.job_dir = dir_;
  paths.gpus = env_.site.gpus;
  auto args = spec_.trainer.kind == job::TrainerSpec::Kind::command
                  ? job::command_trainer_options(spec_, self(), paths)
                  : job::builtin_trainer_options(spec_, self(), paths);
  if (!args.ok()) return args.status();
  TrainerProcessOptions options;
  static_cast<job::TrainerArgs&>(options) = std::move(*args);
  std::weak_ptr<JobRun> weak = weak_from_this();
  options.on_give_up = [weak](const Status& why) {
    if (auto job = weak.lock(); job && job->host_) job->host_->fail(why);
  };
  auto process = TrainerProcess::start(env_.executor, std::move(options));
  if (!process.ok()) return process.status();
  process_ = std::move(*process);
  return {};
}

asio::awaitable<void> JobRun::watch_trainer() {
  auto keep = shared_from_this();
  while (!done()) {
    auto phase = co_await host_->next_phase();
    if (done()) co_return;
    const auto where = machine_->where();
    if (where == ParticipantMachine::Where::finished || where == ParticipantMachine::Where::ended) co_return;
    if (!phase.ok()) {
      machine_->on_trainer_failed(phase.status().message());
      drive();
      co_return;
    }
    // Recorded before the machine sees it: no READY counts work the history
    // lacks. While the history cannot be written (a full disk) the phase
    // waits here, and is late (carried or dropped) once it can.
    record(history::TrainerTokens{phase->round, phase->fragment, diloco::reported_work(phase->tokens, 0).tokens});
    while (buffered_history_ && buffered_history_->blocked() && !done()) co_await changed_.wait();
    if (done()) co_return;
    phase_ = *phase;
    phase_at_ = Clock::now();
    phase_compute_seconds_.reset();
    phase_loop_seconds_.reset();
    if (phase->timing) {
      phase_compute_seconds_ = phase->timing->compute_seconds;
      phase_loop_seconds_ = phase->timing->loop_seconds;
    }
    machine_->on_phase(PhaseReport{phase->round, phase->fragment, phase->tokens, phase->loss});
    drive();
    while (phase_ && !done()) co_await changed_.wait();
  }
}

}  // namespace geoloco::daemon
