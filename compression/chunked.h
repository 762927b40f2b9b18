// Streaming a tensor of any size (10 GB is ordinary) through a pipeline one
// chunk at a time. Memory is bounded by the chunk: the encoder owns one
// output buffer of max_encoded_size(chunk_elements) bytes and the pipeline's
// scratch, whatever the tensor's size. The encoded chunk is what the
// transport sends as one frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/error_feedback.h"
#include "compression/pipeline.h"

namespace geoloco::compression {

/// 1 Mi floats: a 4 MiB raw chunk.
inline constexpr std::uint64_t kDefaultChunkElements = 1ull << 20;

/// How a tensor of `total` values is cut into chunks of `chunk` values (the
/// last one may be shorter).
struct ChunkLayout {
  std::uint64_t total = 0;
  std::uint64_t chunk = kDefaultChunkElements;

  std::uint64_t count() const { return chunk == 0 ? 0 : (total + chunk - 1) / chunk; }
  std::uint64_t offset(std::uint64_t i) const { return i * chunk; }
  std::uint64_t length(std::uint64_t i) const { return i + 1 < count() ? chunk : total - i * chunk; }
};

class ChunkEncoder {
 public:
  /// `pipeline` must outlive the encoder. With `feedback` (sized for the whole
  /// tensor), each chunk goes through error feedback.
  ChunkEncoder(Pipeline& pipeline, ChunkLayout layout, ErrorFeedback* feedback = nullptr);

  /// Encodes chunk i, given its values (layout.length(i) of them). The view
  /// stays valid until the next call. `seed` is the stream's; each chunk
  /// derives its own (counter_rng.h). Errors: invalid_argument (bad index
  /// or length), and those of Pipeline::encode.
  Result<std::span<const std::byte>> encode(std::uint64_t i, std::span<const float> values, std::uint64_t seed);

  const ChunkLayout& layout() const { return layout_; }

 private:
  Pipeline* pipeline_;
  ChunkLayout layout_;
  ErrorFeedback* feedback_;
  std::vector<std::byte> buffer_;
};

class ChunkDecoder {
 public:
  ChunkDecoder(Pipeline& pipeline, ChunkLayout layout);
  /// Decodes the payload of chunk i into `out` (layout.length(i) values).
  /// Errors: invalid_argument (bad index or length), and those of
  /// Pipeline::decode.
  Status decode(std::uint64_t i, std::span<const std::byte> payload, std::span<float> out);

 private:
  Pipeline* pipeline_;
  ChunkLayout layout_;
};

}  // namespace geoloco::compression
