#include "compression/pipeline_spec.h"

#include "common/overload.h"

#include <cmath>

namespace geoloco::compression {

namespace {

// 0 = sparsifier, 1 = value codec, 2 = byte codec.
int stage_rank(const StageSpec& s) {
  if (std::holds_alternative<TopkSpec>(s)) return 0;
  if (std::holds_alternative<ZstdSpec>(s)) return 2;
  return 1;
}

Status validate_stage(const StageSpec& stage) {
  return std::visit(Overload{
                        [](const Fp16Spec&) { return Status(); },
                        [](const Bf16Spec&) { return Status(); },
                        [](const QuantizeSpec& q) {
                          GEOLOCO_RETURN_IF(q.bits != 8 && q.bits != 4 && q.bits != 2, Err::invalid_argument,
                                            "quantize.bits must be 8, 4 or 2, got ", q.bits);
                          GEOLOCO_RETURN_IF(q.block < 8 || q.block > 65536 || q.block % 8 != 0, Err::invalid_argument,
                                            "quantize.block must be a multiple of 8 between 8 and 65536, got ",
                                            q.block);
                          return Status();
                        },
                        [](const TopkSpec& t) {
                          GEOLOCO_RETURN_IF(!(t.density > 0.0 && t.density <= 1.0), Err::invalid_argument,
                                            "topk.density must be in (0, 1], got ", t.density);
                          GEOLOCO_RETURN_IF(t.block < 8 || t.block > 65536, Err::invalid_argument,
                                            "topk.block must be between 8 and 65536, got ", t.block);
                          return Status();
                        },
                        [](const ZstdSpec& z) {
                          GEOLOCO_RETURN_IF(z.level < -7 || z.level > 19, Err::invalid_argument,
                                            "zstd.level must be between -7 and 19, got ", z.level);
                          return Status();
                        },
                    },
                    stage);
}
}  // namespace

Status validate(const PipelineSpec& spec) {
  int previous_rank = -1;
  std::string previous;
  for (const auto& stage : spec.stages) {
    GEOLOCO_TRY(validate_stage(stage));
    const int rank = stage_rank(stage);
    GEOLOCO_RETURN_IF(rank == previous_rank, Err::invalid_argument, "pipeline has both ", previous, " and ",
                      describe(stage),
                      ": at most one sparsifier (topk), one value codec (fp16, bf16, "
                      "quantize) and one zstd");
    GEOLOCO_RETURN_IF(rank < previous_rank, Err::invalid_argument, describe(stage), " cannot come after ", previous,
                      ": the order is topk, then fp16/bf16/quantize, then zstd");
    previous_rank = rank;
    previous = describe(stage);
  }
  return {};
}

std::string describe(const StageSpec& stage) {
  return std::visit(Overload{
                        [](const Fp16Spec&) { return std::string("fp16"); },
                        [](const Bf16Spec&) { return std::string("bf16"); },
                        [](const QuantizeSpec& q) {
                          return cat("quantize(bits=", q.bits, ", block=", q.block,
                                     ", rounding=", q.rounding == Rounding::nearest ? "nearest" : "stochastic", ")");
                        },
                        [](const TopkSpec& t) { return cat("topk(density=", t.density, ", block=", t.block, ")"); },
                        [](const ZstdSpec& z) { return cat("zstd(level=", z.level, ")"); },
                    },
                    stage);
}

std::string describe(const PipelineSpec& spec) {
  if (spec.stages.empty()) return "raw";
  std::string out;
  for (const auto& stage : spec.stages) {
    if (!out.empty()) out += " | ";
    out += describe(stage);
  }
  return out;
}

bool is_lossy(const PipelineSpec& spec) {
  for (const auto& stage : spec.stages) {
    if (!std::holds_alternative<ZstdSpec>(stage)) return true;
  }
  return false;
}

bool uses_error_feedback(const PipelineSpec& spec) {
  switch (spec.error_feedback) {
    case ErrorFeedbackMode::on:
      return true;
    case ErrorFeedbackMode::off:
      return false;
    case ErrorFeedbackMode::automatic:
      return is_lossy(spec);
  }
  return is_lossy(spec);
}

}  // namespace geoloco::compression
