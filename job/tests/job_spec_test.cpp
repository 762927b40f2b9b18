#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include "job/job_spec.h"

using namespace geoloco;
using namespace geoloco::job;

namespace {
Result<JobSpec> parse(const std::string& text, const std::set<std::string>& known = {}) {
  return parse_job_yaml(YAML::Load(text), "job.yaml", known);
}
}  // namespace

TEST_CASE("a complete job file fills every section") {
  auto j = parse(R"(name: demo
sites: [a, b, c]
coordinator: a
seed: 7
trainer: {kind: builtin, model: gpt, layers: 2, width: 64, heads: 4, context: 32, workers: 2}
inner: {optimizer: adamw, lr: 0.003, steps: 40, batch: 16, warmup: 5}
outer: {optimizer: nesterov, lr: 0.7, momentum: 0.9}
compression: [{topk: {density: 0.05}}, {quantize: {bits: 4}}, zstd]
straggler: {deadline: 15s, min_sites: 2, policy: carry, decay: 0.5}
checkpoint: {every_rounds: 3}
stop: {rounds: 12}
)",
                 {"a", "b", "c", "d"});
  INFO(j.status().message());
  REQUIRE(j.ok());
  CHECK(j->sites == std::vector<std::string>{"a", "b", "c"});
  CHECK(j->trainer.model == "gpt");
  CHECK(j->trainer.workers == 2);
  CHECK(j->inner.lr == 0.003);
  CHECK(j->outer.inner.steps == 40);
  CHECK(j->outer.outer.momentum == 0.9);
  CHECK(j->compression.stages.size() == 3);
  CHECK(j->quorum.deadline_ms == std::chrono::seconds(15));
  CHECK(j->quorum.min_sites == 2);
  CHECK(j->checkpoint_every_rounds == 3);
  CHECK(j->stop_rounds == 12u);
  CHECK_FALSE(j->stop_tokens);
}

TEST_CASE("trainer.eval_rounds and eval_items: how often and on how much the anchors are evaluated") {
  const std::string head =
      "name: demo\nsites: [a, b]\ncoordinator: a\ninner: {lr: 0.003, steps: 40}\nstop: {rounds: 3}\n";
  auto plain = parse(head + "trainer: {model: gpt}\n");
  REQUIRE(plain.ok());
  CHECK(plain->trainer.eval_rounds == 1);  // every anchor
  CHECK(plain->trainer.eval_items == 0);   // the trainer's default
  auto sparse = parse(head + "trainer: {model: gpt, eval_rounds: 5, eval_items: 128}\n");
  INFO(sparse.status().message());
  REQUIRE(sparse.ok());
  CHECK(sparse->trainer.eval_rounds == 5);
  CHECK(sparse->trainer.eval_items == 128);
  auto zero = parse(head + "trainer: {model: gpt, eval_rounds: 0}\n");
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().message().find("job.yaml:6:36: trainer.eval_rounds: must be at least 1") != std::string::npos);
  auto negative = parse(head + "trainer: {model: gpt, eval_items: -4}\n");
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.status().message().find("trainer.eval_items") != std::string::npos);
}

TEST_CASE("trainer kind command: the user's program and its arguments, refused without them") {
  const std::string head = "name: demo\nsites: [a, b]\ncoordinator: a\ninner: {steps: 40}\nstop: {rounds: 3}\n";
  auto ok = parse(head + "trainer: {kind: command, command: [python3, train.py, --lr, '0.001']}\n");
  INFO(ok.status().message());
  REQUIRE(ok.ok());
  CHECK(ok->trainer.kind == TrainerSpec::Kind::command);
  CHECK(ok->trainer.command == std::vector<std::string>{"python3", "train.py", "--lr", "0.001"});
  auto missing = parse(head + "trainer: {kind: command}\n");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(),
             Catch::Contains("trainer: kind command needs command: [program, arguments...]"));
  auto empty = parse(head + "trainer: {kind: command, command: []}\n");
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.status().message(), Catch::Contains("trainer.command: expected the program and its arguments"));
  auto stray = parse(head + "trainer: {kind: builtin, model: mlp, command: [x]}\n");
  REQUIRE_FALSE(stray.ok());
  CHECK_THAT(stray.status().message(), Catch::Contains("only a trainer of kind command runs a command"));
  // A trainer section that is not a map is refused, not thrown over (the fuzzer found it).
  auto scalar = parse(head + "trainer: command\n");
  REQUIRE_FALSE(scalar.ok());
  CHECK_THAT(scalar.status().message(), Catch::Contains("trainer"));
}

TEST_CASE("inner.phase_warmup: steps at the start of each phase of H steps, refused without H or beyond it") {
  const std::string head = "name: demo\nsites: [a, b]\ncoordinator: a\ntrainer: {model: mlp}\n";
  auto ok = parse(head + "inner: {lr: 0.003, steps: 40, phase_warmup: 5}\nstop: {rounds: 3}\n");
  INFO(ok.status().message());
  REQUIRE(ok.ok());
  CHECK(ok->inner.phase_warmup == 5);
  auto none = parse(head + "inner: {lr: 0.003, steps: 40}\nstop: {rounds: 3}\n");
  REQUIRE(none.ok());
  CHECK(none->inner.phase_warmup == 0);

  auto longer = parse(head + "inner: {lr: 0.003, steps: 40, phase_warmup: 41}\nstop: {rounds: 3}\n");
  REQUIRE_FALSE(longer.ok());
  CHECK(longer.status().message().find(
            "job.yaml:5:45: inner.phase_warmup: 41 steps is more than a phase (inner.steps = 40)") !=
        std::string::npos);
  auto timed = parse(head + "inner: {lr: 0.003, duration: 30s, phase_warmup: 5}\nstop: {rounds: 3}\n");
  REQUIRE_FALSE(timed.ok());
  CHECK(timed.status().message().find("inner.phase_warmup: needs inner.steps (phases of H steps), not "
                                      "inner.duration") != std::string::npos);
}

TEST_CASE("every problem of a job file is reported at once, each with line and column") {
  auto j = parse(R"(name: demo
sites: [a, b, b, Zed]
coordinator: x
trainer: {model: resnet, data: random}
inner: {lr: -1, steps: 10}
outer: {optimizer: adam}
compression: [lz4]
straggler: {min_sites: 9}
colour: red
)",
                 {"a", "b"});
  REQUIRE_FALSE(j.ok());
  const std::string m = j.status().message();
  INFO(m);
  CHECK(m.find("job.yaml:2:15: sites: 'b' is listed twice") != std::string::npos);
  CHECK(m.find("job.yaml:2:18: sites: a site name uses only") != std::string::npos);
  CHECK(m.find("job.yaml:3:14: coordinator: 'x' is not one of the job's sites") != std::string::npos);
  CHECK(m.find("job.yaml:4:18: trainer.model: expected gpt or mlp") != std::string::npos);
  CHECK(m.find("job.yaml:4:32: trainer.data: expected contiguous or interleaved") != std::string::npos);
  CHECK(m.find("job.yaml:5:13: inner.lr: must be > 0") != std::string::npos);
  CHECK(m.find("job.yaml:6:20: outer.optimizer: expected nesterov or sgd") != std::string::npos);
  CHECK(m.find("job.yaml:7:15: unknown codec 'lz4'") != std::string::npos);
  CHECK(m.find("straggler.min_sites: 9 is more than the job's 3 sites") != std::string::npos);
  CHECK(m.find("job.yaml:9:1: unknown key 'colour'") != std::string::npos);
  CHECK(m.find("stop: missing") != std::string::npos);
}

TEST_CASE("a job naming a site outside the federation is refused") {
  auto j = parse("name: x\nsites: [a, mars]\ncoordinator: a\nstop: {rounds: 1}\n", {"a", "b"});
  REQUIRE_FALSE(j.ok());
  CHECK(j.status().message() == "job.yaml:2:12: sites: 'mars' is not a site of this federation (known: a, b)");
}

TEST_CASE("a malformed job file is refused with its line and column") {
  auto j = load_job_file("tests/data/syntax-error.yaml");
  REQUIRE_FALSE(j.ok());
  CHECK(j.status().message().find("tests/data/syntax-error.yaml:3:") == 0);
  CHECK(load_job_file("tests/data/missing.yaml").status().code() == Err::io);
}

TEST_CASE("a streaming job counts F rounds per period; geolocod's streaming rules are named") {
  const std::string base = R"(name: s
sites: [a, b]
coordinator: a
trainer: {model: gpt, layers: 2}
inner: {steps: 12}
checkpoint: {every_rounds: 2}
stop: {rounds: 5}
)";
  auto j = parse(base + "streaming: {fragments: 3, overlap: 2, alpha: 0.5}\n", {"a", "b"});
  INFO(j.status().message());
  REQUIRE(j.ok());
  CHECK(j->fragments() == 3);
  CHECK(j->last_round() == 15u);  // every fragment syncs 5 times
  CHECK(j->checkpoint_every() == 6u);

  auto plain = parse(base, {"a", "b"});
  REQUIRE(plain.ok());
  CHECK(plain->last_round() == 5u);
  CHECK(plain->checkpoint_every() == 2u);

  auto overlap = parse(base + "streaming: {fragments: 3, overlap: 5}\n", {"a", "b"});
  REQUIRE_FALSE(overlap.ok());
  CHECK_THAT(overlap.status().message(),
             Catch::Contains("job.yaml:8:12: streaming: overlap 5 is more than H/F = 12/3 = 4 steps"));

  auto timed = parse(R"(name: s
sites: [a, b]
coordinator: a
inner: {duration: 30s}
streaming: {fragments: 2}
stop: {rounds: 5}
)",
                     {"a", "b"});
  REQUIRE_FALSE(timed.ok());
  CHECK_THAT(timed.status().message(), Catch::Contains("2 fragments need inner.steps"));

  auto external = parse(R"(name: s
sites: [a, b]
coordinator: a
trainer: {kind: external}
inner: {steps: 12}
streaming: {fragments: 1, alpha: 0.3}
stop: {rounds: 5}
)",
                        {"a", "b"});
  // An external trainer streams as the WELCOME's phase plan says (geoloco.torch).
  INFO(external.status().message());
  REQUIRE(external.ok());
  CHECK(external->outer.streaming.alpha == 0.3);
}
