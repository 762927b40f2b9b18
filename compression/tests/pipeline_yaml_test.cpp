#include "compression/pipeline_yaml.h"

#include <catch2/catch.hpp>
#include <yaml-cpp/yaml.h>

using namespace geoloco;
using namespace geoloco::compression;

TEST_CASE("the pipeline of docs/design.md §5 parses from a job's YAML", "[sanitize]") {
  auto spec = parse_pipeline_text("[{topk: {density: 0.02}}, {quantize: {bits: 4, block: 128}}, {zstd: {level: 3}}]");
  REQUIRE(spec.ok());
  CHECK(describe(*spec) ==
        "topk(density=0.02, block=4096) | quantize(bits=4, block=128, rounding=nearest) | zstd(level=3)");
  CHECK(spec->error_feedback == ErrorFeedbackMode::automatic);
}

TEST_CASE("an empty list is the raw fp32 pipeline", "[sanitize]") {
  auto spec = parse_pipeline_text("[]");
  REQUIRE(spec.ok());
  CHECK(spec->stages.empty());
  CHECK(describe(*spec) == "raw");
}

TEST_CASE("bare names take defaults; a map form sets error feedback", "[sanitize]") {
  auto spec = parse_pipeline_text("pipeline: [topk, fp16, zstd]\nerror_feedback: off\n");
  REQUIRE(spec.ok());
  CHECK(describe(*spec) == "topk(density=0.01, block=4096) | fp16 | zstd(level=3)");
  CHECK(spec->error_feedback == ErrorFeedbackMode::off);
  auto stochastic = parse_pipeline_text("[{quantize: {bits: 2, rounding: stochastic}}]");
  REQUIRE(stochastic.ok());
  CHECK(std::get<QuantizeSpec>(stochastic->stages[0]).rounding == Rounding::stochastic);
}

TEST_CASE("every problem is reported at once with file, line and column", "[sanitize]") {
  const char* text =
      "- topk:\n"
      "    density: lots\n"
      "- quantize: {bits: 3, colour: red}\n"
      "- lz4\n";
  auto spec = parse_pipeline_text(text, "job.yaml");
  REQUIRE_FALSE(spec.ok());
  const auto& m = spec.status().message();
  CHECK(m.find("job.yaml:2:14: topk.density: expected a number") != std::string::npos);
  CHECK(m.find("job.yaml:3:23: quantize: unknown option 'colour' (allowed: bits, block, rounding)") !=
        std::string::npos);
  CHECK(m.find("job.yaml:3:3: quantize.bits must be 8, 4 or 2, got 3") != std::string::npos);
  CHECK(m.find("job.yaml:4:3: unknown codec 'lz4'") != std::string::npos);
}

TEST_CASE("order, shape and syntax errors are refused with a message", "[sanitize]") {
  auto order = parse_pipeline_text("[zstd, fp16]", "j.yaml");
  REQUIRE_FALSE(order.ok());
  CHECK(order.status().message().find("fp16 cannot come after zstd(level=3)") != std::string::npos);

  auto not_list = parse_pipeline_text("zstd", "j.yaml");
  REQUIRE_FALSE(not_list.ok());
  CHECK(not_list.status().message().find("j.yaml:1:1: expected a list of codecs") != std::string::npos);

  auto syntax = parse_pipeline_text("[topk, {quantize: }", "j.yaml");
  REQUIRE_FALSE(syntax.ok());
  CHECK(syntax.status().message().find("j.yaml:1:") == 0);

  auto options_on_cast = parse_pipeline_text("[{fp16: {x: 1}}]", "j.yaml");
  REQUIRE_FALSE(options_on_cast.ok());
  CHECK(options_on_cast.status().message().find("fp16 takes no options") != std::string::npos);

  auto list_key = parse_pipeline_text("[{[a, b]: 1}]", "j.yaml");
  REQUIRE_FALSE(list_key.ok());
  CHECK(list_key.status().message().find("j.yaml:1:") == 0);

  auto bad_ef = parse_pipeline_text("{pipeline: [zstd], error_feedback: maybe}", "j.yaml");
  REQUIRE_FALSE(bad_ef.ok());
  CHECK(bad_ef.status().message().find("error_feedback: expected auto, on or off") != std::string::npos);
}
