// What a job asks of the compression pipeline (docs/design.md §5), as plain data.
// YAML fills these structs (pipeline_yaml.h); validate() says which rule a
// bad value breaks; Pipeline::create() builds the codecs from them.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"

namespace geoloco::compression {

enum class Rounding : std::uint8_t { nearest = 0, stochastic = 1 };

/// Cast to IEEE half precision; values past +-65504 saturate.
struct Fp16Spec {};
/// Cast to bfloat16 (round to nearest even); never produces Inf.
struct Bf16Spec {};
/// Blockwise absmax scaling to signed integers of `bits` bits.
struct QuantizeSpec {
  std::uint32_t bits = 8;     ///< 8, 4 or 2
  std::uint32_t block = 128;  ///< elements per scale; a multiple of 8, at most 65536
  Rounding rounding = Rounding::nearest;
};
/// Keep the largest-magnitude fraction of each block.
struct TopkSpec {
  double density = 0.01;       ///< fraction kept, in (0, 1]
  std::uint32_t block = 4096;  ///< elements per selection block, 8..65536
};
/// Lossless zstd stage over the encoded bytes.
struct ZstdSpec {
  int level = 3;  ///< zstd level, -7..19
};

using StageSpec = std::variant<TopkSpec, Fp16Spec, Bf16Spec, QuantizeSpec, ZstdSpec>;

/// `automatic`: on for lossy pipelines, off for lossless ones.
enum class ErrorFeedbackMode { automatic, on, off };

struct PipelineSpec {
  std::vector<StageSpec> stages;
  ErrorFeedbackMode error_feedback = ErrorFeedbackMode::automatic;
};

/// An empty pipeline sends raw fp32 (lossless, no compression).
/// Checks every rule: order sparsifier (topk), then at
/// most one value codec (fp16, bf16, quantize), then at most one zstd; each
/// parameter in range. Errors: invalid_argument, naming the rule.
Status validate(const PipelineSpec& spec);

/// "topk(density=0.01, block=4096) | quantize(bits=4, block=128, rounding=nearest) | zstd(level=3)",
/// or "raw" for the empty pipeline.
std::string describe(const PipelineSpec& spec);
std::string describe(const StageSpec& stage);

/// Whether any stage loses information.
bool is_lossy(const PipelineSpec& spec);

/// Whether the pipeline runs with error feedback: `on`, or `automatic` and lossy.
bool uses_error_feedback(const PipelineSpec& spec);

}  // namespace geoloco::compression
