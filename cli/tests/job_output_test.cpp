// The job commands' text (cli/job_output.h) from fixed replies: exact lines,
// binary byte units, nulls and wrongly typed fields as "-", and the hints.
#include "cli/job_output.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>

#include "cli/tests/job_fixtures.h"

using namespace geoloco::cli;
using nlohmann::json;

namespace {
std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}
}  // namespace

TEST_CASE("bytes print in binary units with one decimal") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(1023) == "1023 B");
  CHECK(human_bytes(1024) == "1.0 KiB");
  CHECK(human_bytes(1536) == "1.5 KiB");
  CHECK(human_bytes(700000) == "683.6 KiB");
  CHECK(human_bytes(1048575) == "1.0 MiB");  // 1023.999 KiB would print "1024.0 KiB"
  CHECK(human_bytes(13002342) == "12.4 MiB");
  CHECK(human_bytes(3.5 * 1024 * 1024 * 1024) == "3.5 GiB");
  CHECK(human_bytes(1125899906842624.0) == "1.0 PiB");
  CHECK(human_bytes(1024.0 * 1125899906842624.0) == "1024.0 PiB");  // no unit above PiB
}

TEST_CASE("watch prints a header and one aligned line per round") {
  std::string out;
  bool header = false;
  for (const json& line : fixtures::watch_stream()) {
    if (line.contains("round")) {
      if (!header) out += watch_header() + "\n";
      header = true;
      out += watch_round_line(line["round"]) + "\n";
    } else {
      out += watch_event_line(line) + "\n";
    }
  }
  CHECK(out == fixtures::watch_text());
}

TEST_CASE("a round with nulls, missing or mistyped fields prints dashes") {
  CHECK(watch_round_line(json::parse(R"({"round": 7})")) ==
        "    7    0/0         -         -           -        -         -         -         -       -  -");
  CHECK(watch_round_line(json::parse(R"({"round": 8, "participants": ["a"], "late": ["b", "c"], "loss": null,
                                          "eval_loss": null, "bytes_sent": 512, "compression_ratio": null,
                                          "compute_seconds": 1.04, "waiting_seconds": null,
                                          "exchange_seconds": 0.0})")) ==
        "    8    1/3         -         -       512 B        -       1.0         -       0.0       -  b, c");
  CHECK(watch_round_line(json::parse(R"({"round": "8", "participants": "a", "late": [1, "b"], "loss": "2.5",
                                          "bytes_sent": -1})")) ==
        "    -    0/1         -         -           -        -         -         -         -       -  b");
  // Streaming DiLoCo: the round says which fragment it synced.
  CHECK(watch_round_line(json::parse(R"({"round": 12, "fragment": 2})")) ==
        "12:f2    0/0         -         -           -        -         -         -         -       -  -");
  // A round whose state came from a peer: its own zeros are not shown as measured.
  CHECK(
      watch_round_line(json::parse(R"({"round": 9, "participants": ["a", "b"], "late": [], "loss": 2.5,
                                          "bytes_sent": 0, "compression_ratio": 0, "compute_seconds": 0,
                                          "waiting_seconds": 0, "exchange_seconds": 0, "compute_share": null,
                                          "installed_from": "b"})")) ==
      "    9    2/2    2.5000         -           -        -         -         -         -       -  - (state from b)");
  CHECK(watch_round_line(json::parse("[1, 2]")) ==
        "    -    0/0         -         -           -        -         -         -         -       -  -");
  CHECK(watch_event_line(json::parse(R"({"event": "site c left", "state": "running"})")) == "# site c left");
  CHECK(watch_event_line(json::parse(R"({"event": 5})")) == "# ");
}

TEST_CASE("status prints one block per job, nulls as dashes") {
  CHECK(joined(status_lines(fixtures::status_reply(), "")) == fixtures::status_text());
  CHECK(joined(status_lines(fixtures::status_reply(), "mlp-test")) ==
        "mlp-test: starting, round 0 (coordinator b)\n"
        "  live sites  0/1\n"
        "  lagging     -\n"
        "  loss        -\n"
        "  eval loss   -\n"
        "  tokens      0\n"
        "  busy        -\n"
        "  sent        0 B (received 512 B)\n"
        "  checkpoint  none yet\n"
        "  message     waiting for the trainer\n"
        "              it has not said HELLO yet\n");
  CHECK(status_lines(json::parse(R"({"site": "c", "jobs": [{"name": "s", "state": "running", "round": 7,
                                      "stop_rounds": 12, "coordinator": "a", "fragments": 3}]})"),
                     "s")[0] == "s: running, round 7/12 (coordinator a, streaming: 3 fragments, one per round)");
  // After a failover: the successor and its epoch; during an election, that.
  CHECK(status_lines(json::parse(R"({"site": "c", "jobs": [{"name": "s", "state": "running", "round": 7,
                                      "coordinator": "b", "epoch": 2}]})"),
                     "s")[0] == "s: running, round 7 (coordinator b, epoch 2)");
  CHECK(status_lines(json::parse(R"({"site": "c", "jobs": [{"name": "s", "state": "running", "round": 7,
                                      "coordinator": "", "epoch": 3}]})"),
                     "s")[0] == "s: running, round 7 (coordinator: being elected, epoch 3)");
  CHECK(joined(status_lines(json::parse(R"({"site": "c", "jobs": []})"), "")) ==
        "site c: no jobs (`geoloco submit job.yaml` starts one)\n");
  CHECK(joined(status_lines(json::parse(R"({"site": "c", "jobs": [{"name": "x"}]})"), "")) ==
        "site c: 1 job\n"
        "\n"
        "x: -, round - (coordinator -)\n"
        "  live sites  0/0\n"
        "  lagging     -\n"
        "  loss        -\n"
        "  eval loss   -\n"
        "  tokens      -\n"
        "  busy        -\n"
        "  sent        - (received -)\n"
        "  checkpoint  none yet\n"
        "  message     -\n");
}

TEST_CASE("a job the daemon does not know names the jobs it does") {
  const json reply = fixtures::status_reply();
  CHECK(status_has_job(reply, "gpt-demo"));
  CHECK_FALSE(status_has_job(reply, "gpt"));
  CHECK_FALSE(status_has_job(json::parse(R"({"jobs": 3})"), "gpt"));
  CHECK(missing_job_line(reply, "nope") ==
        "no job 'nope' on site b (jobs there: gpt-demo, mlp-test); `geoloco status` lists the jobs");
  CHECK(missing_job_line(json::parse(R"({"site": "a", "jobs": []})"), "nope") ==
        "no job 'nope' on site a (no jobs there); `geoloco status` lists the jobs");
}

TEST_CASE("submit prints the job, its sites and how to follow it") {
  CHECK(submit_lines(json::parse(R"({"job": "gpt-demo", "coordinator": "a", "sites": ["a", "b", "c"],
                                     "message": "accepted; site a starts round 1 when b and c join"})")) ==
        std::vector<std::string>{"submitted job gpt-demo: coordinator a, sites a, b, c",
                                 "accepted; site a starts round 1 when b and c join",
                                 "follow it with: geoloco watch gpt-demo"});
  CHECK(submit_lines(json::parse(R"({"job": "x", "coordinator": "a", "sites": ["a"], "message": ""})")) ==
        std::vector<std::string>{"submitted job x: coordinator a, sites a", "follow it with: geoloco watch x"});
}

TEST_CASE("an unreachable daemon says what to do next") {
  const std::string enoent = std::strerror(ENOENT);
  CHECK(unreachable_lines("status", "/run/geoloco/geolocod.sock", ENOENT, "") ==
        std::vector<std::string>{"geoloco status: cannot reach geolocod at /run/geoloco/geolocod.sock: " + enoent,
                                 "  is geolocod running? `systemctl status geolocod`",
                                 "  another site's daemon: --socket PATH (or GEOLOCO_CONTROL_SOCKET=PATH)"});
  CHECK(unreachable_lines("watch", "/s", EACCES, "") ==
        std::vector<std::string>{"geoloco watch: cannot reach geolocod at /s: " + std::string(std::strerror(EACCES)),
                                 "  add your user to the geoloco group (sudo adduser $USER geoloco) and log in again"});
  CHECK(unreachable_lines("watch", "/s", 0, "geolocod closed the connection: End of file") ==
        std::vector<std::string>{"geoloco watch: lost geolocod at /s: geolocod closed the connection: End of file",
                                 "  is geolocod running? `systemctl status geolocod`",
                                 "  another site's daemon: --socket PATH (or GEOLOCO_CONTROL_SOCKET=PATH)"});
}

TEST_CASE("who the socket admits, by the daemon's rule, and the hint for the rest") {
  const std::vector<gid_t> none;
  CHECK(socket_admits(0, 0, none, 500, 990));             // root
  CHECK(socket_admits(500, 500, none, 500, 990));         // the daemon's user owns the socket
  CHECK(socket_admits(1000, 990, none, 500, 990));        // primary group
  CHECK(socket_admits(1000, 1000, {27, 990}, 500, 990));  // supplementary group
  CHECK_FALSE(socket_admits(1000, 1000, {27}, 500, 990));
  CHECK_FALSE(socket_admits(65534, 65534, none, 0, 0));
  CHECK(hung_up_lines("status", "/s", "cannot send to geolocod: Broken pipe") ==
        std::vector<std::string>{
            "geoloco status: geolocod at /s closed the connection without an answer: cannot send to geolocod: "
            "Broken pipe",
            "  add your user to the geoloco group (sudo adduser $USER geoloco) and log in again"});
}

TEST_CASE("the default socket is the environment's, else the daemon's") {
  CHECK(default_socket_path(nullptr) == "/run/geoloco/geolocod.sock");
  CHECK(default_socket_path("") == "/run/geoloco/geolocod.sock");
  CHECK(default_socket_path("/tmp/site-b.sock") == "/tmp/site-b.sock");
}
