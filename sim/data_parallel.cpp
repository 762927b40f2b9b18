#include "sim/data_parallel.h"

#include "common/digest.h"
#include "common/wan_model.h"
#include "diloco/exchange.h"
#include "inner/collective/collective.h"
#include "inner/cpu/blas.h"
#include "inner/train/run_training.h"
#include "inner/train/trainer.h"
#include "sim/federation.h"

namespace geoloco::sim {

Result<DataParallelReport> run_data_parallel(const DataParallelOptions& o,
                                             const std::function<void(const DataParallelRound&)>& on_round) {
  GEOLOCO_RETURN_IF(o.sites < 1 || o.rounds < 1 || o.steps_per_round < 1, Err::invalid_argument,
                    "data parallel: sites, rounds and steps per round must be at least 1");
  inner::TrainOptions t = o.command.train;
  // One micro-batch per site (and per worker of a site): the global batch of every step.
  t.micro_batches *= static_cast<std::size_t>(o.sites) * static_cast<std::size_t>(std::max(o.command.workers, 1));
  t.data.site_shard = 0;
  t.data.site_shards = 1;
  t.steps = o.rounds * o.steps_per_round;  // the schedule stays the DiLoCo trainers'
  t.eval_every = o.steps_per_round;
  GEOLOCO_TRY(t.validate());
  auto data = inner::load_dataset(t);
  if (!data.ok()) return data.status();
  inner::cpu::set_blas_threads(1);
  inner::SingleCollective collective;
  auto trainer = inner::Trainer::factory()(t, collective, *data, {}, /*initialize=*/true);
  if (!trainer.ok()) return trainer.status();
  DataParallelReport report;
  report.parameters = (*trainer)->layout().total();
  const auto per_step = static_cast<std::uint64_t>(
      diloco::allreduce_bytes_per_site(4.0 * static_cast<double>(report.parameters), o.sites));
  inner::TrainHooks hooks;
  hooks.on_eval = [&](std::uint64_t step, const inner::EvalResult& e) {
    if (step == 0 || step % o.steps_per_round != 0) return;
    DataParallelRound r;
    r.round = step / o.steps_per_round;
    r.eval_loss = e.loss;
    r.accuracy = t.model == "mlp" && e.predictions > 0 ? double(e.correct) / double(e.predictions) : -1;
    r.bytes_per_site = per_step * o.steps_per_round;
    r.exchange_seconds = static_cast<double>(o.steps_per_round) *
                         modelled_exchange_seconds(static_cast<double>(per_step), o.bandwidth_bits_per_s, o.rtt_ms,
                                                   kDataParallelRoundTrips);
    if (on_round) on_round(r);
    report.rounds.push_back(r);
  };
  auto ran = inner::run_training(**trainer, hooks);
  if (!ran.ok()) return ran.status();
  report.digest = digest_hex(digest_f32((*trainer)->host_params()));
  return report;
}

}  // namespace geoloco::sim
