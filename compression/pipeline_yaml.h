// Reads a compression pipeline from a job's YAML (docs/design.md §5, §6):
//
//   compression: [{topk: {density: 0.02}}, {quantize: {bits: 4, block: 128}}, {zstd: {level: 3}}]
//
// or, to set error feedback explicitly,
//
//   compression:
//     pipeline: [topk, {quantize: {bits: 4}}, zstd]
//     error_feedback: auto    # auto (on when lossy) | on | off
//
// A bare codec name takes that codec's defaults. Every problem is reported,
// all in one message, each as "source:line:column: what was expected".
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "compression/pipeline_spec.h"

namespace YAML {
class Node;
}

namespace geoloco::compression {

/// Parses a node of a larger document (the job file). `source` names the file.
/// Errors: invalid_argument, listing every problem.
Result<PipelineSpec> parse_pipeline_yaml(const YAML::Node& node, std::string_view source);

/// Parses YAML text, e.g. a command-line flag "[topk, quantize, zstd]".
Result<PipelineSpec> parse_pipeline_text(std::string_view text, std::string_view source = "<pipeline>");

}  // namespace geoloco::compression
