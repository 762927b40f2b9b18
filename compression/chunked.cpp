#include "compression/chunked.h"

#include "compression/counter_rng.h"

namespace geoloco::compression {

namespace {
Status check_chunk(const ChunkLayout& layout, std::uint64_t i, std::size_t given) {
  GEOLOCO_RETURN_IF(i >= layout.count(), Err::invalid_argument, "chunk ", i, " of a tensor with ", layout.count(),
                    " chunks");
  GEOLOCO_RETURN_IF(given != layout.length(i), Err::invalid_argument, "chunk ", i, " has ", layout.length(i),
                    " values, ", given, " given");
  return {};
}
}  // namespace

ChunkEncoder::ChunkEncoder(Pipeline& pipeline, ChunkLayout layout, ErrorFeedback* feedback)
    : pipeline_(&pipeline), layout_(layout), feedback_(feedback) {
  buffer_.resize(pipeline.max_encoded_size(static_cast<std::size_t>(std::min(layout.chunk, layout.total))));
}

Result<std::span<const std::byte>> ChunkEncoder::encode(std::uint64_t i, std::span<const float> values,
                                                        std::uint64_t seed) {
  GEOLOCO_TRY(check_chunk(layout_, i, values.size()));
  const std::uint64_t s = chunk_seed(seed, i);
  auto size = feedback_ != nullptr ? feedback_->encode(*pipeline_, layout_.offset(i), values, buffer_, s)
                                   : pipeline_->encode(values, buffer_, s);
  if (!size.ok()) return size.status();
  return std::span<const std::byte>(buffer_.data(), *size);
}

ChunkDecoder::ChunkDecoder(Pipeline& pipeline, ChunkLayout layout) : pipeline_(&pipeline), layout_(layout) {}

Status ChunkDecoder::decode(std::uint64_t i, std::span<const std::byte> payload, std::span<float> out) {
  GEOLOCO_TRY(check_chunk(layout_, i, out.size()));
  return pipeline_->decode(payload, out);
}

}  // namespace geoloco::compression
