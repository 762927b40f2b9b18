#include <iostream>
#include <memory>

#include "bench/codec_bench.h"
#include "cli/commands.h"

namespace geoloco::cli {

void add_bench_command(CLI::App& app, Action& action) {
  auto* bench = app.add_subcommand("bench", "Measure geoloco's parts on this machine");
  bench->require_subcommand(1);

  auto options = std::make_shared<bench::CodecBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto* codecs = bench->add_subcommand("codecs", "Codec encode/decode GB/s, ratio and error vs. memcpy, on one core");
  codecs->add_option("--size", options->size_bytes, "fp32 buffer size in bytes")->capture_default_str();
  codecs->add_option("--repeats", options->repeats, "timed passes per figure; the fastest counts")->capture_default_str();
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
}

}  // namespace geoloco::cli
