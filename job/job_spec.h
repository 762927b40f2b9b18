// A job file (docs/design.md §6), validated completely before anything starts: every
// problem of every section, in one message, each with file:line:column.
//
//   name: demo
//   sites: [a, b, c]
//   coordinator: a
//   seed: 1
//   trainer:
//     kind: builtin             # builtin | external (a framework attaches through the sync protocol)
//     model: mlp                # mlp (Fashion-MNIST) | gpt (King James Bible, bytes)
//     layers: 2                 # model size; which keys apply depends on the model
//     width: 128
//     heads: 4                  # gpt only
//     context: 64               # gpt only
//     workers: 1                # data-parallel workers (processes or GPUs) per site
//     data: contiguous          # contiguous (each site its own part) | interleaved (i.i.d. shards)
//   inner: {optimizer: adamw, lr: 0.001, steps: 100, batch: 32, warmup: 10, weight_decay: 0.01, clip: 1.0}
//          # optional: phase_warmup: 5 (the lr ramps up again over the first 5 steps of every phase)
//   outer: {optimizer: nesterov, lr: 0.7, momentum: 0.9}         # outer/job_yaml.h
//   compression: [{topk: {density: 0.01}}, {quantize: {bits: 4}}, zstd]   # compression/pipeline_yaml.h
//   streaming: {fragments: 1}
//   straggler: {deadline: 30s, min_sites: 2, policy: carry, decay: 0.5}
//   checkpoint: {every_rounds: 5}
//   stop: {rounds: 20}         # or {tokens: 1000000}
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/pipeline_spec.h"
#include "diloco/quorum.h"
#include "outer/job_yaml.h"

namespace YAML {
class Node;
}

namespace geoloco::job {

struct TrainerSpec {
  /// builtin: geoloco-train, started by the daemon; command: the user's
  /// program (e.g. a PyTorch loop through geoloco.torch, or torchrun),
  /// started and restarted by the daemon like geoloco-train; external: the
  /// daemon starts nothing and waits for a trainer to attach.
  enum class Kind { builtin, external, command };
  Kind kind = Kind::builtin;
  /// kind command: the program and its arguments, run as they are on every
  /// site (the site's socket, job, shard and shard count come in
  /// GEOLOCO_SOCKET, GEOLOCO_JOB, GEOLOCO_SITE_SHARD, GEOLOCO_SITE_SHARDS).
  std::vector<std::string> command;
  std::string model = "mlp";  ///< builtin: mlp | gpt
  int layers = 2;
  int width = 128;
  int heads = 4;
  int context = 64;
  int workers = 1;  ///< data-parallel workers per site
  /// How the sites' shards lie over the training data (inner/data/sampler.h):
  /// contiguous | interleaved.
  std::string data = "contiguous";
  /// Built-in: each site's trainer evaluates the anchor of every
  /// eval_rounds-th round (and the job's first and last), on
  /// eval_items held-out items (gpt windows, mlp images; 0: the trainer's
  /// default, 512 windows or every image). Evaluations are left out of the
  /// compute share, but they take the trainer's time between rounds.
  std::uint64_t eval_rounds = 1;
  std::uint64_t eval_items = 0;
};

struct InnerSpec {
  std::string optimizer = "adamw";
  double lr = 1e-3;
  std::uint64_t batch = 32;        ///< samples (mlp) or sequences (gpt) per step per worker
  std::uint64_t warmup = 0;        ///< steps of linear warmup
  std::uint64_t phase_warmup = 0;  ///< steps of linear warmup at the start of every inner phase (0 = none)
  double weight_decay = 0.01;
  double clip = 1.0;  ///< global gradient-norm clip, 0 = off
};

struct JobSpec {
  std::string name;
  std::vector<std::string> sites;  ///< in the order the job lists them
  std::string coordinator;
  std::uint64_t seed = 1;
  TrainerSpec trainer;
  InnerSpec inner;
  outer::OuterJobConfig outer;            ///< inner.steps/duration, outer, streaming, straggler policy
  compression::PipelineSpec compression;  ///< empty: raw fp32
  diloco::QuorumOptions quorum;           ///< straggler.deadline and min_sites (heartbeat timeout is the site's)
  std::uint64_t checkpoint_every_rounds = 5;
  std::optional<std::uint64_t> stop_rounds;
  std::optional<std::uint64_t> stop_tokens;

  // geolocod's rounds. With streaming.fragments F each round syncs one
  // fragment (diloco/fragments.h), so the job file's rounds
  // (periods of H inner steps, in which every fragment syncs once, as in
  // geoloco simulate) are F rounds each.
  std::uint32_t fragments() const { return outer.streaming.fragments; }
  /// stop.rounds × F; none without stop.rounds.
  std::optional<std::uint64_t> last_round() const {
    return stop_rounds ? std::optional<std::uint64_t>(*stop_rounds * fragments()) : std::nullopt;
  }
  /// checkpoint.every_rounds × F.
  std::uint64_t checkpoint_every() const { return checkpoint_every_rounds * fragments(); }
};

/// Parses and validates a job document. `known_sites`, when not empty, is
/// the federation (this site and its peers): a job naming another site is
/// refused. Errors: invalid_argument listing every problem.
Result<JobSpec> parse_job_yaml(const YAML::Node& doc, std::string_view source,
                               const std::set<std::string>& known_sites = {});
/// Loads, parses and validates a job file. Errors: io, invalid_argument.
Result<JobSpec> load_job_file(const std::string& path, const std::set<std::string>& known_sites = {});

}  // namespace geoloco::job
