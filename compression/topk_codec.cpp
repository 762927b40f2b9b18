#include "compression/topk_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

namespace geoloco::compression {

namespace {

std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Magnitude keys: the fp32 bits without the sign. For finite floats the
// unsigned order of the keys is the order of |x|.
inline std::uint32_t magnitude_key(float x) { return std::bit_cast<std::uint32_t>(x) & 0x7fffffffu; }

// The k-th largest key of the block and how many values equal to it are
// kept (the lower-indexed ones), by a radix select: a histogram of the top
// 11 key bits finds the bucket holding the k-th largest, then an exact
// selection runs among that bucket's values only.
struct Threshold {
  std::uint32_t key;
  std::uint32_t take_equal;
};

Threshold find_threshold(const std::uint32_t* keys, std::size_t len, std::uint32_t k, std::vector<std::uint16_t>& hist,
                         std::vector<std::uint32_t>& bucket) {
  constexpr int kShift = 20;  // 31-bit keys -> 2048 buckets
  std::fill(hist.begin(), hist.end(), 0);
  for (std::size_t i = 0; i < len; ++i) ++hist[keys[i] >> kShift];
  std::uint32_t above = 0;
  std::size_t b = hist.size();
  while (b > 0 && above + hist[b - 1] < k) above += hist[--b];
  --b;  // the bucket where the k-th largest lies
  bucket.clear();
  for (std::size_t i = 0; i < len; ++i)
    if ((keys[i] >> kShift) == b) bucket.push_back(keys[i]);
  const std::uint32_t need = k - above;  // 1 <= need <= bucket.size()
  std::nth_element(bucket.begin(), bucket.begin() + (need - 1), bucket.end(), std::greater<>());
  const std::uint32_t key = bucket[need - 1];
  std::uint32_t greater = 0;
  for (std::uint32_t v : bucket) greater += v > key;
  return {key, need - greater};
}

}  // namespace

TopkCodec::TopkCodec(std::uint32_t block, std::uint32_t k, Simd simd)
    : block_(block), k_(k), kernels_(&kernels::kernel_table(simd)) {}

TopkCodec TopkCodec::from_spec(const TopkSpec& spec, Simd simd) {
  const double exact = spec.density * spec.block;
  auto k = static_cast<std::uint32_t>(std::ceil(exact - 1e-9));  // 0.02 * 50 is 1, not 2
  k = std::clamp<std::uint32_t>(k, 1, spec.block);
  return TopkCodec(spec.block, k, simd);
}

std::string TopkCodec::describe() const { return cat("topk(k=", k_, " of block=", block_, ")"); }

void TopkCodec::write_params(ByteWriter& out) const {
  out.put<std::uint32_t>(block_);
  out.put<std::uint32_t>(k_);
}

Result<TopkCodec> TopkCodec::read_params(ByteReader& in, Simd simd) {
  const auto block = in.get<std::uint32_t>();
  const auto k = in.get<std::uint32_t>();
  GEOLOCO_RETURN_IF(in.failed(), Err::truncated, "topk parameters are truncated");
  GEOLOCO_RETURN_IF(block < 8 || block > 65536, Err::malformed, "payload header: topk block ", block,
                    " is outside 8..65536");
  GEOLOCO_RETURN_IF(k < 1 || k > block, Err::malformed, "payload header: topk k ", k, " is outside 1..", block);
  return TopkCodec(block, k, simd);
}

std::uint32_t TopkCodec::kept_in_block(std::size_t len) const {
  if (len == 0) return 0;
  if (len >= block_) return k_;
  const std::uint64_t kept = (static_cast<std::uint64_t>(k_) * len + block_ - 1) / block_;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(kept, 1, len));
}

std::size_t TopkCodec::kept_count(std::size_t n) const { return (n / block_) * k_ + kept_in_block(n % block_); }

std::size_t TopkCodec::max_index_bytes(std::size_t n) const { return kept_count(n) * varint_size(block_ - 1); }

Result<std::size_t> TopkCodec::select(std::span<const float> in, std::span<std::byte> indices,
                                      std::span<float> values) const {
  const std::size_t n = in.size();
  GEOLOCO_RETURN_IF(values.size() < kept_count(n) || indices.size() < max_index_bytes(n), Err::invalid_argument,
                    describe(), ": output buffers too small for ", n, " values");
  std::vector<std::uint32_t> keys(block_);
  std::vector<std::uint16_t> hist(2048);
  std::vector<std::uint32_t> bucket;
  bucket.reserve(block_);
  ByteWriter index_out(indices);
  std::size_t kept = 0;

  for (std::size_t begin = 0; begin < n; begin += block_) {
    const std::size_t len = std::min<std::size_t>(block_, n - begin);
    const float* x = in.data() + begin;
    GEOLOCO_RETURN_IF(!kernels_->all_finite(x, len), Err::non_finite, describe(),
                      ": input has a NaN or Inf in elements [", begin, ", ", begin + len, ")");
    const std::uint32_t k = kept_in_block(len);
    for (std::size_t i = 0; i < len; ++i) keys[i] = magnitude_key(x[i]);
    // Keep everything when k == len; otherwise keys above the threshold,
    // and the first take_equal keys equal to it.
    Threshold t =
        k == len ? Threshold{0, static_cast<std::uint32_t>(len)} : find_threshold(keys.data(), len, k, hist, bucket);
    std::size_t previous = 0;
    bool first = true;
    for (std::size_t i = 0; i < len; ++i) {
      const std::uint32_t key = keys[i];
      if (key < t.key) continue;
      if (key == t.key) {
        if (t.take_equal == 0) continue;
        --t.take_equal;
      }
      index_out.put_varint(first ? i : i - previous - 1);
      values[kept++] = x[i];
      previous = i;
      first = false;
    }
  }
  GEOLOCO_RETURN_IF(index_out.failed() || kept != kept_count(n), Err::internal, describe(), ": selected ", kept,
                    " values, expected ", kept_count(n));
  return index_out.size();
}

Status TopkCodec::scatter(std::span<const std::byte> indices, std::span<const float> values,
                          std::span<float> out) const {
  const std::size_t n = out.size();
  GEOLOCO_RETURN_IF(values.size() != kept_count(n), Err::mismatch, describe(), ": ", values.size(), " values given, ",
                    kept_count(n), " expected for ", n, " elements");
  std::fill(out.begin(), out.end(), 0.0f);
  ByteReader in(indices);
  std::size_t v = 0;
  for (std::size_t begin = 0; begin < n; begin += block_) {
    const std::size_t len = std::min<std::size_t>(block_, n - begin);
    const std::uint32_t k = kept_in_block(len);
    std::uint64_t next = 0;  // smallest index the next entry may take
    for (std::uint32_t j = 0; j < k; ++j) {
      const std::uint64_t gap = in.get_varint();
      GEOLOCO_RETURN_IF(in.failed(), Err::malformed, describe(), ": index section ends inside block ", begin / block_);
      GEOLOCO_RETURN_IF(gap >= len || next + gap >= len, Err::malformed, describe(), ": index past the end of block ",
                        begin / block_, " (", len, " values)");
      const std::uint64_t index = next + gap;
      out[begin + index] = values[v++];
      next = index + 1;
    }
  }
  GEOLOCO_RETURN_IF(in.remaining() != 0, Err::malformed, describe(), ": ", in.remaining(),
                    " unused bytes after the index section");
  return {};
}

}  // namespace geoloco::compression
