#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include "job/job_trainer.h"

using namespace geoloco;
using namespace geoloco::job;

namespace {
JobSpec a_job(
    const std::string& trainer,
    const std::string& inner = "{lr: 0.002, steps: 40, batch: 32, warmup: 10, weight_decay: 0.05, clip: 0.5}") {
  auto j = parse_job_yaml(YAML::Load("name: demo\nsites: [site-a, site-b, site-c]\ncoordinator: site-a\nseed: 9\n"
                                     "trainer: " +
                                     trainer + "\ninner: " + inner + "\nstop: {rounds: 5}\n"),
                          "job.yaml");
  INFO(j.status().message());
  REQUIRE(j.ok());
  return *j;
}
}  // namespace

TEST_CASE("a job's built-in trainer becomes geoloco-train's options for each site") {
  auto o = builtin_trainer_options(a_job("{model: mlp, layers: 3, width: 128, workers: 2}"), "site-b",
                                   {"/usr/bin/geoloco-train", "/var/lib/geoloco/jobs/demo", {}});
  REQUIRE(o.ok());
  CHECK(o->program == "/usr/bin/geoloco-train");
  CHECK(o->socket_path == "/var/lib/geoloco/jobs/demo/sync.sock");
  CHECK(o->log_path == "/var/lib/geoloco/jobs/demo/trainer.log");
  CHECK(o->job == "demo");
  CHECK(o->model == "mlp");
  CHECK(o->hidden == std::vector<std::size_t>{128, 128});
  CHECK(o->sync_every == 40);
  CHECK(o->steps == 5 * 40 + 40);
  CHECK(o->decay_steps == 5 * 40);  // the cosine ends with the last round, not the spare room
  CHECK(o->data_split.empty());     // contiguous: the trainer's default, no flag
  CHECK(o->batch == 32);
  CHECK(o->lr == 0.002);
  CHECK(o->warmup == 10u);
  CHECK(o->seed == 9u);
  CHECK(o->site_shard == 1);
  CHECK(o->site_shards == 3);
  CHECK(o->workers == 2);
  CHECK(o->weight_decay == 0.05);
  CHECK(o->clip == 0.5);
  CHECK(o->eval_log == "/var/lib/geoloco/jobs/demo/eval.jsonl");
  CHECK(o->state_dir == "/var/lib/geoloco/jobs/demo/trainer-state");
  CHECK(o->cache_dir == "/var/lib/geoloco/jobs/demo/dataset-cache");
  const auto a = trainer_arguments(*o);
  auto value_of = [&a](const std::string& flag) {
    auto it = std::find(a.begin(), a.end(), flag);
    return it == a.end() || it + 1 == a.end() ? std::string("(absent)") : *(it + 1);
  };
  CHECK(value_of("--sync-every") == "40");
  CHECK(value_of("--decay-steps") == "200");
  CHECK(value_of("--data-split") == "(absent)");
  CHECK(value_of("--phase-warmup") == "(absent)");  // none unless the job asks
  CHECK(value_of("--merge") == "(absent)");         // the replacing merge: the trainer's default
  CHECK(value_of("--sync-seconds") == "(absent)");
  CHECK(value_of("--weight-decay") == "0.05");
  CHECK(value_of("--clip") == "0.5");
  CHECK(value_of("--eval-log") == "/var/lib/geoloco/jobs/demo/eval.jsonl");
  CHECK(value_of("--state-dir") == "/var/lib/geoloco/jobs/demo/trainer-state");
  CHECK(value_of("--cache-dir") == "/var/lib/geoloco/jobs/demo/dataset-cache");
  CHECK(value_of("--eval-rounds") == "(absent)");  // every anchor: the trainer's default
  CHECK(value_of("--eval-limit") == "(absent)");

  auto g =
      builtin_trainer_options(a_job("{model: gpt, layers: 4, width: 64, heads: 4, context: 32, data: interleaved}"),
                              "site-c", {"geoloco-train", "/tmp/j", {}});
  REQUIRE(g.ok());
  CHECK(g->layers == 4);
  CHECK(g->width == 64);
  CHECK(g->heads == 4);
  CHECK(g->context == 32);
  CHECK(g->site_shard == 2);
  const auto args = trainer_arguments(*g);
  CHECK(std::find(args.begin(), args.end(), "--sync-every") != args.end());
  CHECK(std::find(args.begin(), args.end(), "--cache-dir") == args.end());  // gpt reads plain text: nothing to cache
  auto split = std::find(args.begin(), args.end(), "--data-split");
  REQUIRE(split != args.end());
  CHECK(*(split + 1) == "interleaved");

  auto e = builtin_trainer_options(a_job("{model: gpt, eval_rounds: 4, eval_items: 96}"), "site-a",
                                   {"geoloco-train", "/tmp/j", {}});
  REQUIRE(e.ok());
  const auto ea = trainer_arguments(*e);
  auto every = std::find(ea.begin(), ea.end(), "--eval-rounds");
  REQUIRE(every != ea.end());
  CHECK(*(every + 1) == "4");
  auto items = std::find(ea.begin(), ea.end(), "--eval-limit");
  REQUIRE(items != ea.end());
  CHECK(*(items + 1) == "96");

  auto w = builtin_trainer_options(a_job("{model: mlp}", "{lr: 0.002, steps: 40, phase_warmup: 6}"), "site-a",
                                   {"geoloco-train", "/tmp/j", {}});
  REQUIRE(w.ok());
  CHECK(w->phase_warmup == 6);
  const auto wa = trainer_arguments(*w);
  auto pw = std::find(wa.begin(), wa.end(), "--phase-warmup");
  REQUIRE(pw != wa.end());
  CHECK(*(pw + 1) == "6");
}

TEST_CASE("a trainer of kind command runs the job's command as it is, with the site's shard") {
  auto j = parse_job_yaml(YAML::Load("name: demo\nsites: [site-a, site-b, site-c]\ncoordinator: site-a\n"
                                     "trainer: {kind: command, command: [/usr/bin/python3, train.py, --lr, '0.01']}\n"
                                     "inner: {steps: 40}\nstop: {rounds: 5}\n"),
                          "job.yaml");
  REQUIRE(j.ok());
  auto o = command_trainer_options(*j, "site-c", {"geoloco-train", "/var/lib/geoloco/jobs/demo", {}});
  REQUIRE(o.ok());
  CHECK(trainer_arguments(*o) == std::vector<std::string>{"/usr/bin/python3", "train.py", "--lr", "0.01"});
  CHECK(o->program == "/usr/bin/python3");
  CHECK(o->socket_path == "/var/lib/geoloco/jobs/demo/sync.sock");
  CHECK(o->log_path == "/var/lib/geoloco/jobs/demo/trainer.log");
  CHECK(o->site_shard == 2);
  CHECK(o->site_shards == 3);
  CHECK(command_trainer_options(*j, "site-x", {"x", "/j", {}}).status().code() == Err::invalid_argument);
  CHECK(builtin_trainer_options(*j, "site-a", {"x", "/j", {}}).status().code() == Err::invalid_argument);
}

TEST_CASE("a site with GPUs runs its trainer on them, one worker per GPU") {
  auto o = builtin_trainer_options(a_job("{model: gpt, workers: 1}"), "site-a", {"x", "/j", {2, 3}});
  REQUIRE(o.ok());
  CHECK(o->backend == "cuda");
  CHECK(o->workers == 2);
  CHECK(o->visible_gpus == std::vector<int>{2, 3});
  const auto a = trainer_arguments(*o);
  CHECK(*(std::find(a.begin(), a.end(), "--backend") + 1) == "cuda");
  CHECK(*(std::find(a.begin(), a.end(), "--workers") + 1) == "2");
  auto cpu = builtin_trainer_options(a_job("{model: gpt, workers: 2}"), "site-a", {"x", "/j", {}});
  REQUIRE(cpu.ok());
  CHECK(cpu->backend.empty());
  CHECK(cpu->workers == 2);
}

TEST_CASE("inner.duration becomes time-based rounds with no step bound") {
  auto o = builtin_trainer_options(a_job("{model: mlp}", "{duration: 90s, min_steps: 5}"), "site-a", {"x", "/j", {}});
  REQUIRE(o.ok());
  CHECK(o->sync_seconds == 90.0);
  CHECK(o->min_steps == 5);
  CHECK(o->steps == 1'000'000'000ull);
  CHECK(o->decay_steps == 0);  // no known end: the cosine spans --steps
  const auto a = trainer_arguments(*o);
  auto it = std::find(a.begin(), a.end(), "--sync-seconds");
  REQUIRE(it != a.end());
  CHECK(*(it + 1) == "90");
  CHECK(*(std::find(a.begin(), a.end(), "--min-steps") + 1) == "5");
  CHECK(std::find(a.begin(), a.end(), "--sync-every") == a.end());
}

TEST_CASE("a streaming job's overlap and alpha go to the trainer") {
  auto j = parse_job_yaml(YAML::Load("name: s\nsites: [site-a, site-b]\ncoordinator: site-a\ntrainer: {model: mlp}\n"
                                     "inner: {steps: 12}\nstreaming: {fragments: 3, overlap: 2, alpha: 0.25}\n"
                                     "stop: {rounds: 5}\n"),
                          "job.yaml");
  REQUIRE(j.ok());
  auto o = builtin_trainer_options(*j, "site-b", {"x", "/j", {}});
  REQUIRE(o.ok());
  CHECK(o->overlap_steps == 2);
  CHECK(o->alpha == 0.25);
  CHECK(o->sync_every == 12);
  CHECK(o->steps == 5 * 12 + 12);  // stop.rounds counts periods of H steps
  const auto a = trainer_arguments(*o);
  CHECK(*(std::find(a.begin(), a.end(), "--overlap") + 1) == "2");
  CHECK(*(std::find(a.begin(), a.end(), "--alpha") + 1) == "0.25");
  CHECK(std::find(a.begin(), a.end(), "--merge") == a.end());
}

TEST_CASE("the delayed outer step goes to the trainer as --merge delayed with the whole next phase to overlap") {
  auto j = parse_job_yaml(YAML::Load("name: s\nsites: [site-a, site-b]\ncoordinator: site-a\ntrainer: {model: mlp}\n"
                                     "inner: {steps: 12}\nstreaming: {merge: delayed}\nstop: {rounds: 5}\n"),
                          "job.yaml");
  INFO(j.status().message());
  REQUIRE(j.ok());
  auto o = builtin_trainer_options(*j, "site-a", {"x", "/j", {}});
  REQUIRE(o.ok());
  CHECK(o->merge_delayed);
  const auto a = trainer_arguments(*o);
  CHECK(*(std::find(a.begin(), a.end(), "--merge") + 1) == "delayed");
  CHECK(*(std::find(a.begin(), a.end(), "--overlap") + 1) == "11");

  auto timed = parse_job_yaml(YAML::Load("name: s\nsites: [site-a, site-b]\ncoordinator: site-a\n"
                                         "trainer: {model: mlp}\ninner: {duration: 30s}\n"
                                         "streaming: {merge: delayed}\nstop: {rounds: 5}\n"),
                              "job.yaml");
  REQUIRE_FALSE(timed.ok());
  CHECK(timed.status().message().find("streaming: merge: delayed needs inner.steps") != std::string::npos);
}

TEST_CASE("no trainer options for an external trainer or a stranger site") {
  CHECK(builtin_trainer_options(a_job("{kind: external}"), "site-a", {"x", "/j", {}}).status().message() ==
        "job 'demo' has an external trainer: the daemon starts none, it waits for one to attach");
  CHECK(builtin_trainer_options(a_job("{model: mlp}"), "mars", {"x", "/j", {}}).status().code() ==
        Err::invalid_argument);
}
