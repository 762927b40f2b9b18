// A job's status file and round records: what a restarted geolocod reads to
// resume a job, and what status and watch print, checked by value.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "daemon/job_status.h"

using namespace geoloco;
using namespace geoloco::daemon;

TEST_CASE("a job's status file reads back as written; a damaged or foreign one is refused by name") {
  const auto dir = std::filesystem::temp_directory_path() / ("geoloco-job-status-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CHECK(read_status_file(dir.string()).status().code() == Err::io);  // none yet
  for (auto state : {JobState::starting, JobState::running, JobState::finished, JobState::failed, JobState::cancelled,
                     JobState::stopped}) {
    REQUIRE(write_status_file(dir.string(), {state, "/etc/geoloco/jobs/demo.yaml", "round 3 committed"}).ok());
    auto back = read_status_file(dir.string());
    REQUIRE(back.ok());
    CHECK(back->state == state);
    CHECK(back->file == "/etc/geoloco/jobs/demo.yaml");
    CHECK(back->message == "round 3 committed");
  }
  CHECK_FALSE(std::filesystem::exists(dir / "status.json.tmp"));
  std::ofstream(dir / "status.json", std::ios::trunc) << "{\"state\": \"paused\"}\n";
  auto unknown = read_status_file(dir.string());
  CHECK(unknown.status().code() == Err::malformed);
  CHECK(unknown.status().message() == (dir / "status.json").string() + ": unknown job state 'paused'");
  std::ofstream(dir / "status.json", std::ios::trunc) << "{\"state\": \"runn";  // torn
  CHECK(read_status_file(dir.string()).status().code() == Err::malformed);
  CHECK(write_status_file((dir / "missing").string(), {}).code() == Err::io);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a round's record shows the eval loss of the anchor it started from, and its fragment when streaming") {
  RoundRecord r;
  r.round = 4;
  r.participants = {"a", "b"};
  r.late = {"c"};
  r.loss = 1.5;
  r.tokens = 640;
  r.bytes_sent = 1000;
  r.digest = "00000000000000a4";
  r.contributed = true;
  auto j = record_json(r, {{3, 2.0}, {4, 1.75}});
  CHECK(j["round"] == 4);
  CHECK(j["eval_loss"] == 1.75);
  CHECK(j["late"] == std::vector<std::string>{"c"});
  CHECK(j["tokens"] == 640);
  CHECK(j["digest"] == "00000000000000a4");
  CHECK_FALSE(j.contains("fragment"));
  // No timing from the trainer: the share is unknown, not 0.
  CHECK(j.at("compute_share").is_null());
  CHECK(j.at("trainer_compute_seconds").is_null());
  r.trainer_compute_seconds = 3.0;
  r.trainer_loop_seconds = 4.0;
  j = record_json(r, {});
  CHECK(j["compute_share"] == 0.75);
  CHECK(j["trainer_compute_seconds"] == 3.0);
  CHECK(j["trainer_loop_seconds"] == 4.0);
  r.trainer_loop_seconds = 0.0;  // a loop that took no time has no share
  CHECK(record_json(r, {}).at("compute_share").is_null());
  CHECK(record_json(r, {}).at("eval_loss").is_null());
  r.fragments = 3;
  r.fragment = 1;
  CHECK(record_json(r, {})["fragment"] == 1);
}

TEST_CASE("a job's status: tokens of all rounds, the latest losses, and who is live as the last round saw it") {
  std::vector<RoundRecord> records(2);
  records[0].round = 1;
  records[0].participants = {"a", "b", "c"};
  records[0].tokens = 300;
  records[0].loss = 2.0;
  records[1].round = 2;
  records[1].participants = {"c", "a"};
  records[1].late = {"b"};
  records[1].tokens = 200;
  records[1].loss = 1.5;
  records[1].trainer_compute_seconds = 9.0;  // only round 2's trainer measured its time
  records[1].trainer_loop_seconds = 12.0;
  JobStatusView v;
  v.name = "demo";
  v.state = JobState::running;
  v.sites = {"a", "b", "c"};
  v.round = 2;
  v.stop_rounds = 12;
  v.records = &records;
  v.eval.loss = {{1, 2.5}, {2, 2.25}, {3, 2.0}};
  v.eval.accuracy = {{2, 0.5}, {3, 0.625}};
  v.where = "training";
  auto j = status_json(v);
  CHECK(j["state"] == "running");
  CHECK(j["tokens"] == 500);
  CHECK(j["loss"] == 1.5);
  CHECK(j["eval_loss"] == 2.0);
  CHECK(j["eval_round"] == 3);
  CHECK(j["eval_accuracy"] == 0.625);
  CHECK(j["rounds"].size() == 2);
  CHECK(j["rounds"][1]["eval_loss"] == 2.25);  // round 2 started from the anchor evaluated as round 2
  CHECK(j["live_sites"] == std::vector<std::string>{"a", "b", "c"});
  CHECK(j["lagging"] == std::vector<std::string>{"b"});
  CHECK(j["stop_rounds"] == 12);
  CHECK(j["checkpoint"].is_null());
  CHECK(j["anchor_digest"].is_null());
  CHECK(j["where"] == "training");
  CHECK(j["compute_share"] == 0.75);  // over the rounds that say, not diluted by those that do not
  records[0].trainer_compute_seconds = 3.0;
  records[0].trainer_loop_seconds = 8.0;
  CHECK(status_json(v)["compute_share"] == 0.6);  // (3 + 9) / (8 + 12): summed seconds, not a mean of shares

  v.eval.accuracy.erase(3);  // gpt: no accuracy for the latest anchor
  v.liveness.emplace(std::vector<std::string>{"a", "c"}, std::vector<std::string>{"b"});
  v.checkpoint = "/var/lib/geoloco/jobs/demo/checkpoint.safetensors";
  j = status_json(v);
  CHECK(j["eval_accuracy"].is_null());
  CHECK(j["live_sites"] == std::vector<std::string>{"a", "c"});
  CHECK(j["checkpoint"] == "/var/lib/geoloco/jobs/demo/checkpoint.safetensors");

  const auto empty = status_json(JobStatusView{});
  CHECK(empty["tokens"] == 0);
  CHECK(empty["loss"].is_null());
  CHECK(empty["eval_loss"].is_null());
  CHECK(empty["compute_share"].is_null());
  CHECK(empty["live_sites"].empty());
}
