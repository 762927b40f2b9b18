// Fixed daemon replies (the control protocol in cli/README.md) and the exact
// text `geoloco` prints for them, shared by the formatting test and the
// end-to-end test so both hold the binary to the same bytes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace geoloco::cli::fixtures {

/// The reply line of `status`: site b, one running job with every field set
/// and one starting job whose optional fields are null.
inline nlohmann::json status_reply() {
  return nlohmann::json::parse(R"({
    "site": "b",
    "jobs": [
      {"name": "gpt-demo", "state": "running", "coordinator": "a", "sites": ["a", "b", "c"],
       "round": 12, "stop_rounds": 100, "tokens": 1179648, "live_sites": ["a", "b"], "lagging": ["c"],
       "loss": 2.71828, "eval_loss": 2.8, "eval_accuracy": 0.4132,
       "bytes_sent": 13002342, "bytes_received": 11534336, "compute_share": 0.97312,
       "checkpoint": "/var/lib/geoloco/jobs/gpt-demo/round-000010.safetensors",
       "message": "round 12 committed", "rounds": []},
      {"name": "mlp-test", "state": "starting", "coordinator": "b", "sites": ["b"],
       "round": 0, "stop_rounds": null, "tokens": 0, "live_sites": [], "lagging": [],
       "loss": null, "eval_loss": null, "eval_accuracy": null,
       "bytes_sent": 0, "bytes_received": 512, "checkpoint": null,
       "message": "waiting for the trainer\nit has not said HELLO yet", "rounds": []}
    ]})");
}

/// `geoloco status` for status_reply().
inline const char* status_text() {
  return "site b: 2 jobs\n"
         "\n"
         "gpt-demo: running, round 12/100 (coordinator a)\n"
         "  live sites  2/3: a, b\n"
         "  lagging     c\n"
         "  loss        2.7183\n"
         "  eval loss   2.8000 (accuracy 0.4132)\n"
         "  tokens      1179648\n"
         "  busy        97.3% of the trainer's time in inner steps\n"
         "  sent        12.4 MiB (received 11.0 MiB)\n"
         "  checkpoint  /var/lib/geoloco/jobs/gpt-demo/round-000010.safetensors\n"
         "  message     round 12 committed\n"
         "\n"
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
         "              it has not said HELLO yet\n";
}

/// A `watch` stream of a job that runs three rounds (site c late in round 2)
/// and finishes; the final done line is the server's.
inline std::vector<nlohmann::json> watch_stream() {
  std::vector<nlohmann::json> lines;
  for (const char* text :
       {R"({"event": "job gpt-demo running on a, b, c", "state": "running"})",
        R"({"round": {"round": 1, "participants": ["a", "b", "c"], "late": [], "loss": 3.21875, "eval_loss": null,
               "tokens": 98304, "bytes_sent": 1572864, "bytes_received": 1572864, "compression_ratio": 24.13,
               "compute_seconds": 30.04, "waiting_seconds": 0.26, "exchange_seconds": 1.47, "compute_share": 0.99512,
               "digest": "0123456789abcdef"}})",
        R"({"round": {"round": 2, "participants": ["a", "b"], "late": ["c"], "loss": 2.9, "eval_loss": 3.0512,
               "tokens": 65536, "bytes_sent": 700000, "bytes_received": 650000, "compression_ratio": 47.9,
               "compute_seconds": 29.8, "waiting_seconds": 12.46, "exchange_seconds": 0.91, "compute_share": null,
               "digest": "fedcba9876543210"}})",
        R"({"event": "site c is back", "state": "running"})",
        R"({"round": {"round": 3, "participants": ["a", "b", "c"], "late": [], "loss": 2.71828, "eval_loss": 2.8,
               "tokens": 98304, "bytes_sent": 1048575, "bytes_received": 1048575, "compression_ratio": 1234.56,
               "compute_seconds": 31.0, "waiting_seconds": 0.0, "exchange_seconds": 2.07, "compute_share": 1.0,
               "digest": "00ff00ff00ff00ff"}})",
        R"({"event": "job gpt-demo finished after 3 rounds", "state": "finished"})"})
    lines.push_back(nlohmann::json::parse(text));
  return lines;
}

/// `geoloco watch gpt-demo` for watch_stream().
inline const char* watch_text() {
  return "# job gpt-demo running on a, b, c\n"
         "round  sites      loss      eval        sent    ratio   compute   waiting  exchange    busy  lagging\n"
         "    1    3/3    3.2188         -     1.5 MiB    24.1x      30.0       0.3       1.5   99.5%  -\n"
         "    2    2/3    2.9000    3.0512   683.6 KiB    47.9x      29.8      12.5       0.9       -  c\n"
         "# site c is back\n"
         "    3    3/3    2.7183    2.8000     1.0 MiB  1234.6x      31.0       0.0       2.1  100.0%  -\n"
         "# job gpt-demo finished after 3 rounds\n";
}

}  // namespace geoloco::cli::fixtures
