// The Codec interface: one class per compression stage (docs/design.md §5).
//
// A pipeline has at most one stage of each kind, in this order:
//   1. a sparsifier  (topk):            n dense floats -> indices + m kept floats
//   2. a value codec (fp16/bf16/quantize): floats -> bytes of a size fixed by the count
//   3. a byte codec  (zstd):            bytes -> fewer bytes, lossless
// Without a value codec the floats travel as raw fp32. Every stage writes its
// parameters into the payload header (write_params) so that a decoder can
// rebuild the chain and refuse what it cannot decode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>
#include <string>

#include "common/byte_io.h"
#include "common/status.h"

namespace geoloco::compression {

/// Stage identifiers on the wire. Never renumber: payloads carry them.
enum class CodecId : std::uint8_t { fp16 = 1, bf16 = 2, quantize = 3, topk = 4, zstd = 5 };

enum class CodecKind { sparsifier, value, bytes };

class Codec {
 public:
  virtual ~Codec() = default;
  virtual CodecId id() const = 0;
  virtual CodecKind kind() const = 0;
  /// e.g. "quantize(bits=4, block=128, rounding=nearest)".
  virtual std::string describe() const = 0;
  /// Whether decode(encode(x)) can differ from x.
  virtual bool lossy() const = 0;
  /// The parameters the decoder needs, as written into the payload header.
  virtual void write_params(ByteWriter& out) const = 0;
};

/// sum[i] ← sum[i] + share · v[i]: a multiply, then an add (this folder is
/// compiled without contraction), the term diloco::add_weighted adds.
inline void add_scaled(std::span<float> sum, std::span<const float> v, float share) {
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + share * v[i];
}

/// Dense floats <-> bytes whose size depends only on the number of floats.
class ValueCodec : public Codec {
 public:
  CodecKind kind() const final { return CodecKind::value; }
  /// Exact encoded size of n floats.
  virtual std::size_t encoded_size(std::size_t n) const = 0;
  /// Encodes `in` into the first encoded_size(in.size()) bytes of `out`.
  /// `seed` keys the counter-based generator of stochastic rounding (ignored
  /// otherwise). Errors: non_finite (an input is NaN or Inf),
  /// invalid_argument (out too small).
  virtual Status encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t seed) const = 0;
  /// Decodes exactly encoded_size(out.size()) bytes. Errors: mismatch (wrong
  /// size), malformed (a field no encoder writes, e.g. a non-finite scale).
  virtual Status decode(std::span<const std::byte> in, std::span<float> out) const = 0;
  /// sum[i] ← sum[i] + share · v[i] (a multiply, then an add) for the values
  /// v that decode() gives, with its checks; on error `sum` holds no
  /// meaningful values. This one decodes whole first; a codec may fuse.
  virtual Status decode_add(std::span<const std::byte> in, std::span<float> sum, float share) const {
    std::vector<float> v(sum.size());
    GEOLOCO_TRY(decode(in, v));
    add_scaled(sum, v, share);
    return {};
  }
};

/// Dense floats -> (delta-coded indices, kept floats) and back.
class Sparsifier : public Codec {
 public:
  CodecKind kind() const final { return CodecKind::sparsifier; }
  /// Number of floats kept out of n.
  virtual std::size_t kept_count(std::size_t n) const = 0;
  /// Worst-case size of the index section for n floats.
  virtual std::size_t max_index_bytes(std::size_t n) const = 0;
  /// Selects kept_count(in.size()) floats into `values` (in index order) and
  /// writes their indices into `indices`. Returns the index section's size.
  /// Errors: non_finite, invalid_argument (buffers too small).
  virtual Result<std::size_t> select(std::span<const float> in, std::span<std::byte> indices,
                                     std::span<float> values) const = 0;
  /// Writes the dense result into `out` (zeros where nothing was kept).
  /// Errors: malformed (indices out of range, not ascending, or not exactly
  /// consuming `indices`), mismatch (values.size() != kept_count(out.size())).
  virtual Status scatter(std::span<const std::byte> indices, std::span<const float> values,
                         std::span<float> out) const = 0;
};

/// Lossless bytes -> bytes.
class ByteCodec : public Codec {
 public:
  CodecKind kind() const final { return CodecKind::bytes; }
  bool lossy() const final { return false; }
  virtual std::size_t max_encoded_size(std::size_t raw_size) const = 0;
  /// Returns the encoded size. Errors: invalid_argument, internal.
  virtual Result<std::size_t> encode(std::span<const std::byte> in, std::span<std::byte> out) const = 0;
  /// Decodes into exactly out.size() bytes. Errors: malformed (corrupt
  /// input), mismatch (decoded size differs from out.size()).
  virtual Status decode(std::span<const std::byte> in, std::span<std::byte> out) const = 0;
};

}  // namespace geoloco::compression
