#include <catch2/catch.hpp>
#include <cmath>

#include "daemon/metrics.h"
#include "daemon/site_metrics.h"

using namespace geoloco;
using namespace geoloco::daemon;

TEST_CASE("metrics render in Prometheus text format, sorted and escaped") {
  Metrics m;
  REQUIRE(m.declare("geoloco_rounds_total", Metrics::Type::counter, "Rounds committed.").ok());
  REQUIRE(m.declare("geoloco_bytes_sent_total", Metrics::Type::counter, "Bytes sent to a peer.").ok());
  REQUIRE(m.declare("geoloco_loss", Metrics::Type::gauge, "Eval loss of the anchor.").ok());
  REQUIRE(m.add("geoloco_rounds_total", {{"job", "demo"}}, 1).ok());
  REQUIRE(m.add("geoloco_rounds_total", {{"job", "demo"}}, 2).ok());
  REQUIRE(m.add("geoloco_bytes_sent_total", {{"job", "demo"}, {"peer", "b"}}, 1024).ok());
  REQUIRE(m.add("geoloco_bytes_sent_total", {{"job", "demo"}, {"peer", "a\"x"}}, 5).ok());
  REQUIRE(m.set("geoloco_loss", {{"job", "demo"}}, 0.25).ok());
  CHECK(m.value("geoloco_rounds_total", {{"job", "demo"}}) == 3);
  CHECK(m.render() ==
        "# HELP geoloco_bytes_sent_total Bytes sent to a peer.\n"
        "# TYPE geoloco_bytes_sent_total counter\n"
        "geoloco_bytes_sent_total{job=\"demo\",peer=\"a\\\"x\"} 5\n"
        "geoloco_bytes_sent_total{job=\"demo\",peer=\"b\"} 1024\n"
        "# HELP geoloco_loss Eval loss of the anchor.\n"
        "# TYPE geoloco_loss gauge\n"
        "geoloco_loss{job=\"demo\"} 0.25\n"
        "# HELP geoloco_rounds_total Rounds committed.\n"
        "# TYPE geoloco_rounds_total counter\n"
        "geoloco_rounds_total{job=\"demo\"} 3\n");
}

TEST_CASE("a removed gauge sample is not rendered; its siblings stay") {
  Metrics m;
  REQUIRE(m.declare("geoloco_tls_certificate_expiry_timestamp_seconds", Metrics::Type::gauge, "notAfter.").ok());
  const Labels b{{"certificate", "peer"}, {"peer", "b"}}, c{{"certificate", "peer"}, {"peer", "c"}};
  REQUIRE(m.set("geoloco_tls_certificate_expiry_timestamp_seconds", b, 1800000000).ok());
  REQUIRE(m.set("geoloco_tls_certificate_expiry_timestamp_seconds", c, 1900000000).ok());
  m.remove("geoloco_tls_certificate_expiry_timestamp_seconds", c);
  m.remove("geoloco_tls_certificate_expiry_timestamp_seconds", {{"peer", "nobody"}});  // none: nothing happens
  CHECK(m.render() ==
        "# HELP geoloco_tls_certificate_expiry_timestamp_seconds notAfter.\n"
        "# TYPE geoloco_tls_certificate_expiry_timestamp_seconds gauge\n"
        "geoloco_tls_certificate_expiry_timestamp_seconds{certificate=\"peer\",peer=\"b\"} 1800000000\n");
}

TEST_CASE("metric names and uses that break the conventions are refused") {
  Metrics m;
  CHECK(m.declare("rounds_total", Metrics::Type::counter, "").message().find("start with geoloco_") !=
        std::string::npos);
  CHECK(m.declare("geoloco_rounds", Metrics::Type::counter, "").message() ==
        "counter 'geoloco_rounds' must end in _total");
  CHECK(m.declare("geoloco_Loss", Metrics::Type::gauge, "").code() == Err::invalid_argument);
  REQUIRE(m.declare("geoloco_loss", Metrics::Type::gauge, "").ok());
  CHECK(m.declare("geoloco_loss", Metrics::Type::counter, "").code() == Err::invalid_argument);
  CHECK(m.add("geoloco_loss", {}, 1).message() == "'geoloco_loss' is not a declared counter");
  REQUIRE(m.declare("geoloco_x_total", Metrics::Type::counter, "").ok());
  CHECK(m.add("geoloco_x_total", {}, -1).code() == Err::invalid_argument);
  CHECK(m.set("geoloco_x_total", {}, 1).code() == Err::invalid_argument);
  CHECK(m.add("geoloco_x_total", {{"bad-label", "v"}}, 1).code() == Err::invalid_argument);
  CHECK(m.value("geoloco_x_total", {}) == 0);
  // A loss that is not finite is still shown (prometheus-cpp spells it
  // "Nan"; Prometheus reads NaN in any case).
  REQUIRE(m.set("geoloco_loss", {}, std::nan("")).ok());
  CHECK(m.render().find("\ngeoloco_loss Nan\n") != std::string::npos);
}

TEST_CASE("a committed round adds to the site's counters and sets the round's gauges") {
  Metrics m;
  declare_site_metrics(m);
  RoundRecord r;
  r.round = 3;
  r.participants = {"a", "b"};
  r.late = {"c"};
  r.loss = 1.25;
  r.tokens = 640;
  r.compression_ratio = 4.5;
  r.exchange_seconds = 0.75;
  show_committed_round(m, "demo", r);  // no timing from the trainer: no share
  CHECK(m.render().find("geoloco_compute_share{") == std::string::npos);
  r.round = 4;
  r.late.clear();
  r.loss = 1.125;
  r.trainer_compute_seconds = 2.5;
  r.trainer_loop_seconds = 4.0;
  show_committed_round(m, "demo", r);
  r.round = 5;
  r.trainer_compute_seconds = 3.5;
  r.trainer_loop_seconds = 4.0;
  show_committed_round(m, "demo", r);
  const Labels job{{"job", "demo"}};
  CHECK(m.value("geoloco_rounds_total", job) == 3);
  CHECK(m.value("geoloco_tokens_total", job) == 1920);
  CHECK(m.value("geoloco_stragglers_total", job) == 1);
  CHECK(m.value("geoloco_round", job) == 5);
  CHECK(m.value("geoloco_compute_share", job) == 0.875);  // the last round's
  CHECK(m.value("geoloco_trainer_compute_seconds_total", job) == 6.0);
  CHECK(m.value("geoloco_trainer_loop_seconds_total", job) == 8.0);
  CHECK(m.value("geoloco_loss", job) == 1.125);
  CHECK(m.value("geoloco_round_participants", job) == 2);
  CHECK(m.value("geoloco_compression_ratio", job) == 4.5);
  CHECK(m.value("geoloco_round_exchange_seconds", job) == 0.75);
  // Shown with their help text once they have a value; a metric without one
  // is not written (no state transfer yet).
  CHECK(m.render().find("# HELP geoloco_rounds_total Rounds committed by this site.\n") != std::string::npos);
  CHECK(m.render().find("geoloco_state_sync_seconds") == std::string::npos);
}
