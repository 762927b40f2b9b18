// A compression pipeline: the job's codec chain (docs/design.md §5) turning one
// chunk of fp32 values into one self-describing payload (payload.h) and back.
//
// Calls are shaped like zstd's: the caller passes spans, max_encoded_size(n)
// is the worst case, results are a size or an error. A Pipeline keeps scratch
// buffers bounded by the largest chunk it has seen, so one object serves one
// thread at a time; make one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/payload.h"
#include "compression/pipeline_spec.h"
#include "compression/simd.h"

namespace geoloco::compression {

/// The three optional stages of a chain (codec.h), owned.
struct Stages {
  std::unique_ptr<Sparsifier> sparsifier;
  std::unique_ptr<ValueCodec> value;
  std::unique_ptr<ByteCodec> bytes;
  int count() const { return (sparsifier ? 1 : 0) + (value ? 1 : 0) + (bytes ? 1 : 0); }
};

class Pipeline {
 public:
  /// Builds the codecs. Errors: invalid_argument (validate()'s rules).
  static Result<Pipeline> create(const PipelineSpec& spec, Simd simd = detected_simd());

  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;
  ~Pipeline();

  const PipelineSpec& spec() const { return spec_; }
  std::string describe() const { return compression::describe(spec_); }
  bool lossy() const { return is_lossy(spec_); }
  /// Whether the job's error feedback is on for this pipeline.
  bool error_feedback() const;

  /// Worst-case payload size for n values.
  std::size_t max_encoded_size(std::size_t n) const;
  /// Encodes `in` into `out` and returns the payload size. `seed` keys
  /// stochastic rounding. Errors: non_finite (an input is NaN or Inf, named
  /// by range), invalid_argument (out smaller than max_encoded_size).
  Result<std::size_t> encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t seed);
  /// Decodes a payload of this pipeline into exactly out.size() values.
  /// Errors: truncated, malformed, unsupported (see payload.h), mismatch
  /// (another chain, or another element count). On error `out` holds no
  /// meaningful values, and nothing is read or written out of bounds.
  Status decode(std::span<const std::byte> payload, std::span<float> out);
  /// sum[i] ← sum[i] + share · v[i] for the payload's values v, in fp32
  /// with no contraction: the bits of decode() then diloco::add_weighted().
  /// A raw fp32 chain adds straight from the payload's bytes, a value
  /// codec (quantize) a block at a time; a sparsified chain decodes whole
  /// into scratch first. Errors: as decode(); on error `sum` holds no
  /// meaningful values.
  Status decode_add(std::span<const std::byte> payload, std::span<float> sum, float share);
  /// Checks a payload's header without decoding its body: this pipeline's
  /// chain, `values` elements, and a body as long as the header says. A body
  /// that does not decode passes; decode() refuses it. Errors: as decode()'s
  /// for the header, mismatch for another element count.
  Status check_header(std::span<const std::byte> payload, std::size_t values) const;
  /// decode() of the payload the last encode() wrote, without undoing its
  /// byte codec (zstd), which is lossless: from the raw body the encode kept
  /// (error feedback's decode of what leaves the site). `payload` must be the
  /// bytes that encode wrote, where it wrote them, unchanged; the same values
  /// as decode(). Any other payload (another place or length, or after
  /// another encode or decode) is decoded by decode(). Errors: as decode().
  Status decode_last_encoded(std::span<const std::byte> payload, std::span<float> out);

  /// The stage descriptors this pipeline writes into every header.
  std::span<const std::byte> descriptor() const { return descriptor_; }

 private:
  Pipeline(PipelineSpec spec, Stages stages, std::vector<std::byte> descriptor);
  /// The payload's header, when it is of this pipeline's chain.
  Result<PayloadHeader> own_header(std::span<const std::byte> payload) const;

  PipelineSpec spec_;
  Stages stages_;
  std::vector<std::byte> descriptor_;
  std::vector<float> values_scratch_;
  std::vector<float> decoded_scratch_;  ///< decode_add()'s values, for sparsified chains
  std::vector<std::byte> index_scratch_;
  std::vector<std::byte> raw_scratch_;
  /// The last encode()'s raw body, kept in raw_scratch_ (with a byte codec only).
  struct LastRaw {
    std::size_t values = 0, bytes = 0;
    const std::byte* payload = nullptr;  ///< where the encode wrote its payload
    std::size_t payload_size = 0;
  };
  std::optional<LastRaw> last_raw_;
};

/// Decodes a payload of any chain this build knows, rebuilding the codecs
/// from its header. Errors: as Pipeline::decode.
Status decode_payload(std::span<const std::byte> payload, std::span<float> out, Simd simd = detected_simd());

/// What a payload's header says, for logs and tools.
struct PayloadInfo {
  std::uint64_t element_count = 0;
  std::uint64_t payload_size = 0;
  std::string chain;  ///< e.g. "topk(k=41 of block=4096) | quantize(...) | zstd(level=3)"
};
Result<PayloadInfo> inspect_payload(std::span<const std::byte> payload);

}  // namespace geoloco::compression
