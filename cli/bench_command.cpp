#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "bench/allreduce_bench.h"
#include "bench/codec_bench.h"
#include "bench/step_bench.h"
#include "cli/commands.h"
#include "common/units.h"

namespace geoloco::cli {

namespace {

// --size takes 268435456, 256Mi or 268M (common/units.h): rewritten to bytes for CLI11.
CLI::Validator size_in_bytes() {
  return CLI::Validator(
      [](std::string& text) {
        auto bytes = parse_size(text);
        if (!bytes.ok()) return bytes.status().message();
        text = std::to_string(*bytes);
        return std::string();
      },
      "BYTES");
}

// --rate takes 400M, 1G or a plain bit/s (common/units.h), 0 for no cap:
// rewritten to Mbit/s, the unit the benchmark's options and output use.
CLI::Validator rate_in_mbit() {
  return CLI::Validator(
      [](std::string& text) {
        auto rate = parse_rate_cap(text);
        if (!rate.ok()) return rate.status().message();
        std::ostringstream mbit;
        mbit << std::setprecision(17) << *rate / 1e6;
        text = mbit.str();
        return std::string();
      },
      "BIT/S");
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  auto* bench = app.add_subcommand("bench", "Measure geoloco's parts on this machine");
  bench->require_subcommand(1);

  auto options = std::make_shared<bench::CodecBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto* codecs = bench->add_subcommand("codecs", "Codec encode/decode GB/s, ratio and error vs. memcpy, on one core");
  codecs->add_option("--size", options->size_bytes, "fp32 buffer size in bytes (suffixes k M G, Ki Mi Gi)")
      ->transform(size_in_bytes())
      ->capture_default_str();
  codecs->add_option("--repeats", options->repeats, "timed passes per figure; the fastest counts")
      ->capture_default_str();
  codecs->add_option("--seed", options->seed, "seed of the synthetic pseudo-gradient")->capture_default_str();
  codecs->add_flag("--json", *json, "one JSON object per codec and line");
  codecs->callback([&action, options, json] {
    action = [options, json] {
      auto rows = bench::run_codec_bench(*options);
      if (!rows.ok()) {
        std::cerr << "geoloco bench codecs: " << rows.status().message() << '\n';
        return 2;
      }
      if (*json) bench::print_codec_json(*rows, std::cout);
      else bench::print_codec_table(*rows, options->size_bytes, std::cout);
      return 0;
    };
  });

  auto ar = std::make_shared<bench::AllReduceBenchOptions>();
  auto ar_json = std::make_shared<bool>(false);
  auto* allreduce = bench->add_subcommand(
      "allreduce",
      "Two-phase all-reduce over loopback TLS: bytes, seconds, Gbit/s per site vs. the link bound and Gloo");
  allreduce->add_option("--sites", ar->sites, "sites (threads in this process)")->capture_default_str();
  allreduce->add_option("--size", ar->size_bytes, "fp32 tensor size in bytes (suffixes k M G, Ki Mi Gi)")
      ->transform(size_in_bytes())
      ->capture_default_str();
  allreduce->add_option("--rate", ar->rate_mbit, "cap on each site's egress in bit/s (suffixes k M G; 0 = none)")
      ->transform(rate_in_mbit())
      ->default_str("0");
  allreduce->add_option("--repeats", ar->repeats, "timed runs; the fastest counts")->capture_default_str();
  allreduce->add_option("--connections", ar->connections_per_peer, "TLS connections per peer pair")
      ->capture_default_str();
  allreduce->add_option("--io-threads", ar->io_threads, "threads per site that run its connections (TLS, hashing)")
      ->capture_default_str();
  allreduce->add_option("--chunk-elements", ar->chunk_elements, "fp32 values per chunk (frame)")->capture_default_str();
  allreduce->add_flag("--json", *ar_json, "one JSON object per system and line");
  allreduce->add_flag("!--no-baseline", ar->compare_gloo, "skip the Gloo baseline");
  allreduce->add_flag("--plaintext", ar->plaintext,
                      "plain TCP instead of TLS (shows what TLS costs; never in production)");
  allreduce->callback([&action, ar, ar_json] {
    action = [ar, ar_json] {
      auto rows = bench::run_allreduce_bench(*ar);
      if (!rows.ok()) {
        std::cerr << "geoloco bench allreduce: " << rows.status().message() << '\n';
        return 2;
      }
      if (*ar_json) bench::print_allreduce_json(*rows, std::cout);
      else bench::print_allreduce_table(*rows, std::cout);
      return 0;
    };
  });

  auto st = std::make_shared<bench::StepBenchOptions>();
  auto st_json = std::make_shared<bool>(false);
  auto* step = bench->add_subcommand(
      "step", "The passes over the model that end a round (the vote's digest, the outer step) on 1 thread and more");
  step->add_option("--values", st->values, "parameters (suffixes k M G, Ki Mi Gi)")
      ->transform(size_in_bytes())
      ->capture_default_str();
  step->add_option("--threads", st->threads, "thread counts, e.g. 1,2,4 (default: 1 and step_threads' default)")
      ->delimiter(',');
  step->add_option("--repeats", st->repeats, "timed passes per figure; the fastest counts")->capture_default_str();
  step->add_option("--seed", st->seed, "seed of the synthetic anchor, momentum and Δ")->capture_default_str();
  step->add_flag("--raw", st->raw, "Δ as raw fp32 chunks (default: q8 + zstd, the usual job's)");
  step->add_flag("--json", *st_json, "one JSON object per thread count and line");
  step->callback([&action, st, st_json] {
    action = [st, st_json] {
      auto rows = bench::run_step_bench(*st);
      if (!rows.ok()) {
        std::cerr << "geoloco bench step: " << rows.status().message() << '\n';
        return 2;
      }
      if (*st_json) bench::print_step_json(*rows, std::cout);
      else bench::print_step_table(*rows, *st, std::cout);
      return std::all_of(rows->begin(), rows->end(), [](const auto& r) { return r.same_bits; }) ? 0 : 1;
    };
  });
}

}  // namespace geoloco::cli
