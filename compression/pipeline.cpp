#include "compression/pipeline.h"

#include <cstring>
#include <variant>

#include "common/byte_io.h"
#include "compression/cast_codec.h"
#include "compression/kernels/kernels.h"
#include "compression/payload.h"
#include "compression/quantize_codec.h"
#include "compression/topk_codec.h"
#include "compression/zstd_codec.h"

namespace geoloco::compression {

namespace {

Stages stages_from_spec(const PipelineSpec& spec, Simd simd) {
  Stages s;
  for (const auto& stage : spec.stages) {
    if (auto* t = std::get_if<TopkSpec>(&stage))
      s.sparsifier = std::make_unique<TopkCodec>(TopkCodec::from_spec(*t, simd));
    if (std::holds_alternative<Fp16Spec>(stage)) s.value = std::make_unique<CastCodec>(CastCodec::Format::fp16, simd);
    if (std::holds_alternative<Bf16Spec>(stage)) s.value = std::make_unique<CastCodec>(CastCodec::Format::bf16, simd);
    if (auto* q = std::get_if<QuantizeSpec>(&stage)) s.value = std::make_unique<QuantizeCodec>(*q, simd);
    if (auto* z = std::get_if<ZstdSpec>(&stage)) s.bytes = std::make_unique<ZstdCodec>(*z);
  }
  return s;
}

std::vector<std::byte> write_descriptor(const Stages& s) {
  std::vector<std::byte> out(256);
  ByteWriter w(out);
  for (const Codec* c : {static_cast<const Codec*>(s.sparsifier.get()), static_cast<const Codec*>(s.value.get()),
                         static_cast<const Codec*>(s.bytes.get())}) {
    if (c == nullptr) continue;
    std::byte params[64];
    ByteWriter p(params);
    c->write_params(p);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(c->id()));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(p.size()));
    w.put_bytes(std::span<const std::byte>(params, p.size()));
  }
  out.resize(w.size());
  return out;
}

// Rebuilds the chain a payload names. The order rule (sparsifier, value,
// bytes) is checked here too: a reordered chain is not something we misread.
Result<Stages> stages_from_descriptor(const PayloadHeader& h, Simd simd) {
  Stages s;
  ByteReader in(h.descriptor);
  int rank = -1;
  for (int i = 0; i < h.stage_count; ++i) {
    const auto id = in.get<std::uint8_t>();
    const auto size = in.get<std::uint8_t>();
    auto params_bytes = in.get_bytes(size);
    GEOLOCO_RETURN_IF(in.failed(), Err::truncated, "payload: stage descriptor ", i, " is truncated");
    ByteReader params(params_bytes);
    int this_rank = 1;
    switch (static_cast<CodecId>(id)) {
      case CodecId::fp16:
      case CodecId::bf16:
        s.value = std::make_unique<CastCodec>(
            static_cast<CodecId>(id) == CodecId::fp16 ? CastCodec::Format::fp16 : CastCodec::Format::bf16, simd);
        break;
      case CodecId::quantize: {
        auto q = QuantizeCodec::read_params(params);
        if (!q.ok()) return q.status();
        s.value = std::make_unique<QuantizeCodec>(*q, simd);
        break;
      }
      case CodecId::topk: {
        auto t = TopkCodec::read_params(params, simd);
        if (!t.ok()) return t.status();
        s.sparsifier = std::make_unique<TopkCodec>(std::move(*t));
        this_rank = 0;
        break;
      }
      case CodecId::zstd: {
        auto z = ZstdCodec::read_params(params);
        if (!z.ok()) return z.status();
        s.bytes = std::make_unique<ZstdCodec>(*z);
        this_rank = 2;
        break;
      }
      default:
        return GEOLOCO_ERROR(Err::unsupported, "payload: codec id ", int(id), " is unknown to this build");
    }
    GEOLOCO_RETURN_IF(params.remaining() != 0, Err::malformed, "payload: stage ", i, " has ", params.remaining(),
                      " unexpected parameter bytes");
    GEOLOCO_RETURN_IF(this_rank <= rank, Err::malformed,
                      "payload: stages out of order (topk, then a value codec, then zstd)");
    rank = this_rank;
  }
  GEOLOCO_RETURN_IF(in.remaining() != 0, Err::malformed, "payload: ", in.remaining(),
                    " bytes after the last stage descriptor");
  return s;
}

std::size_t value_section_size(const Stages& s, std::size_t m) {
  return s.value ? s.value->encoded_size(m) : m * sizeof(float);
}

std::size_t max_raw_body_size(const Stages& s, std::size_t n) {
  if (!s.sparsifier) return value_section_size(s, n);
  return sizeof(std::uint32_t) + s.sparsifier->max_index_bytes(n) + value_section_size(s, s.sparsifier->kept_count(n));
}

Status encode_values(const Stages& s, std::span<const float> values, std::span<std::byte> out, std::uint64_t seed) {
  if (s.value) return s.value->encode(values, out, seed);
  const auto& k = kernels::kernel_table(detected_simd());
  GEOLOCO_RETURN_IF(!k.copy_finite(values.data(), values.size(), out.data()), Err::non_finite,
                    "pipeline: input has a NaN or Inf");
  return {};
}

Status decode_values(const Stages& s, std::span<const std::byte> in, std::span<float> out) {
  if (s.value) return s.value->decode(in, out);
  GEOLOCO_RETURN_IF(in.size() != out.size_bytes(), Err::malformed, "payload: raw value section of ", in.size(),
                    " bytes for ", out.size(), " values");
  const auto& k = kernels::kernel_table(detected_simd());
  GEOLOCO_RETURN_IF(!k.copy_finite(in.data(), out.size(), out.data()), Err::malformed,
                    "payload: raw values hold a NaN or Inf");
  return {};
}

// decode_values() added into `sum` instead (Pipeline::decode_add): raw
// fp32 straight from the bytes, checked in the same pass.
Status add_values(const Stages& s, std::span<const std::byte> in, std::span<float> sum, float share) {
  if (s.value) return s.value->decode_add(in, sum, share);
  GEOLOCO_RETURN_IF(in.size() != sum.size_bytes(), Err::malformed, "payload: raw value section of ", in.size(),
                    " bytes for ", sum.size(), " values");
  const auto& k = kernels::kernel_table(detected_simd());
  GEOLOCO_RETURN_IF(!k.add_weighted_finite(in.data(), sum.size(), share, sum.data()), Err::malformed,
                    "payload: raw values hold a NaN or Inf");
  return {};
}

// The body decoder shared by Pipeline::decode and decode_payload. Every size
// is checked against what `stages` and out.size() allow before it is used,
// so scratch buffers never exceed the worst case of out.size() values.
Status decode_raw(const Stages& s, std::span<const std::byte> raw, std::span<float> out,
                  std::vector<float>& values_scratch);
// The raw body of a payload of n values (the byte codec undone into
// raw_scratch, or the body itself), every size checked.
Result<std::span<const std::byte>> raw_body(const Stages& s, const PayloadHeader& h, std::size_t n,
                                            std::vector<std::byte>& raw_scratch) {
  GEOLOCO_RETURN_IF(h.element_count != n, Err::mismatch, "payload: holds ", h.element_count,
                    " values, the receiver expects ", n);
  const std::size_t m = s.sparsifier ? s.sparsifier->kept_count(n) : n;
  const std::size_t value_bytes = value_section_size(s, m);
  const std::size_t min_raw = s.sparsifier ? sizeof(std::uint32_t) + value_bytes : value_bytes;
  const std::size_t max_raw = max_raw_body_size(s, n);
  GEOLOCO_RETURN_IF(h.raw_body_size < min_raw || h.raw_body_size > max_raw, Err::malformed, "payload: raw body of ",
                    h.raw_body_size, " bytes; ", n, " values in this chain need ", min_raw, " to ", max_raw);

  std::span<const std::byte> raw = h.body;
  if (s.bytes) {
    raw_scratch.resize(static_cast<std::size_t>(h.raw_body_size));
    GEOLOCO_TRY(s.bytes->decode(h.body, raw_scratch));
    raw = raw_scratch;
  } else {
    GEOLOCO_RETURN_IF(h.body_size != h.raw_body_size, Err::malformed, "payload: body of ", h.body_size,
                      " bytes but raw body of ", h.raw_body_size, " without a byte codec");
  }
  return raw;
}

Status decode_body(const Stages& s, const PayloadHeader& h, std::span<float> out, std::vector<float>& values_scratch,
                   std::vector<std::byte>& raw_scratch) {
  auto raw = raw_body(s, h, out.size(), raw_scratch);
  if (!raw.ok()) return raw.status();
  return decode_raw(s, *raw, out, values_scratch);
}

// The values of a raw body (what the byte codec gives back, or the body
// without one), of a size decode_body() checked.
Status decode_raw(const Stages& s, std::span<const std::byte> raw, std::span<float> out,
                  std::vector<float>& values_scratch) {
  if (!s.sparsifier) return decode_values(s, raw, out);
  const std::size_t m = s.sparsifier->kept_count(out.size());
  const std::size_t value_bytes = value_section_size(s, m);

  ByteReader in(raw);
  const auto index_bytes = in.get<std::uint32_t>();
  GEOLOCO_RETURN_IF(sizeof(std::uint32_t) + std::uint64_t{index_bytes} + value_bytes != raw.size(), Err::malformed,
                    "payload: index section of ", index_bytes, " bytes does not fit a raw body of ", raw.size());
  auto indices = in.get_bytes(index_bytes);
  auto value_section = in.get_bytes(value_bytes);
  values_scratch.resize(m);
  GEOLOCO_TRY(decode_values(s, value_section, values_scratch));
  return s.sparsifier->scatter(indices, values_scratch, out);
}

}  // namespace

Pipeline::Pipeline(PipelineSpec spec, Stages stages, std::vector<std::byte> descriptor)
    : spec_(std::move(spec)), stages_(std::move(stages)), descriptor_(std::move(descriptor)) {}
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;
Pipeline::~Pipeline() = default;

Result<Pipeline> Pipeline::create(const PipelineSpec& spec, Simd simd) {
  GEOLOCO_TRY(validate(spec));
  Stages stages = stages_from_spec(spec, simd);
  auto descriptor = write_descriptor(stages);
  return Pipeline(spec, std::move(stages), std::move(descriptor));
}

bool Pipeline::error_feedback() const { return uses_error_feedback(spec_); }

std::size_t Pipeline::max_encoded_size(std::size_t n) const {
  const std::size_t raw = max_raw_body_size(stages_, n);
  return kPayloadFixedHeaderSize + descriptor_.size() + (stages_.bytes ? stages_.bytes->max_encoded_size(raw) : raw);
}

Result<std::size_t> Pipeline::encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t seed) {
  const std::size_t n = in.size();
  GEOLOCO_RETURN_IF(out.size() < max_encoded_size(n), Err::invalid_argument, "pipeline: output buffer of ", out.size(),
                    " bytes, max_encoded_size(", n, ") is ", max_encoded_size(n));
  const std::size_t header_size = kPayloadFixedHeaderSize + descriptor_.size();
  const std::size_t max_raw = max_raw_body_size(stages_, n);
  last_raw_.reset();

  // Without a byte codec the raw body is written in place after the header.
  std::span<std::byte> raw_out = out.subspan(header_size);
  if (stages_.bytes) {
    raw_scratch_.resize(max_raw);
    raw_out = raw_scratch_;
  }

  std::size_t raw_size = 0;
  if (stages_.sparsifier) {
    const std::size_t m = stages_.sparsifier->kept_count(n);
    values_scratch_.resize(m);
    index_scratch_.resize(stages_.sparsifier->max_index_bytes(n));
    auto index_size = stages_.sparsifier->select(in, index_scratch_, values_scratch_);
    if (!index_size.ok()) return index_size.status();
    ByteWriter w(raw_out);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(*index_size));
    w.put_bytes(std::span<const std::byte>(index_scratch_.data(), *index_size));
    const std::size_t value_bytes = value_section_size(stages_, m);
    GEOLOCO_TRY(encode_values(stages_, values_scratch_, raw_out.subspan(w.size(), value_bytes), seed));
    raw_size = w.size() + value_bytes;
  } else {
    raw_size = value_section_size(stages_, n);
    GEOLOCO_TRY(encode_values(stages_, in, raw_out.first(raw_size), seed));
  }

  std::size_t body_size = raw_size;
  if (stages_.bytes) {
    auto z = stages_.bytes->encode(raw_out.first(raw_size), out.subspan(header_size));
    if (!z.ok()) return z.status();
    body_size = *z;
  }

  PayloadHeader h;
  h.stage_count = static_cast<std::uint8_t>(stages_.count());
  h.element_count = n;
  h.raw_body_size = raw_size;
  h.body_size = body_size;
  h.descriptor = descriptor_;
  write_payload_header(h, out);
  if (stages_.bytes) last_raw_ = LastRaw{n, raw_size, out.data(), header_size + body_size};
  return header_size + body_size;
}

Result<PayloadHeader> Pipeline::own_header(std::span<const std::byte> payload) const {
  auto h = parse_payload_header(payload);
  if (!h.ok()) return h.status();
  const bool same_chain = h->stage_count == stages_.count() && h->descriptor.size() == descriptor_.size() &&
                          std::memcmp(h->descriptor.data(), descriptor_.data(), descriptor_.size()) == 0;
  if (!same_chain) {
    auto info = inspect_payload(payload);
    return GEOLOCO_ERROR(Err::mismatch, "payload: encoded with ", info.ok() ? info->chain : "an unreadable chain",
                         ", this pipeline is ", describe());
  }
  return h;
}

Status Pipeline::decode(std::span<const std::byte> payload, std::span<float> out) {
  last_raw_.reset();  // raw_scratch_ is overwritten
  auto h = own_header(payload);
  if (!h.ok()) return h.status();
  return decode_body(stages_, *h, out, values_scratch_, raw_scratch_);
}

Status Pipeline::decode_add(std::span<const std::byte> payload, std::span<float> sum, float share) {
  if (stages_.sparsifier) {  // the kept values land anywhere: decoded whole first
    decoded_scratch_.resize(sum.size());
    GEOLOCO_TRY(decode(payload, decoded_scratch_));
    add_scaled(sum, decoded_scratch_, share);
    return {};
  }
  last_raw_.reset();  // raw_scratch_ is overwritten
  auto h = own_header(payload);
  if (!h.ok()) return h.status();
  auto raw = raw_body(stages_, *h, sum.size(), raw_scratch_);
  if (!raw.ok()) return raw.status();
  return add_values(stages_, *raw, sum, share);
}

Status Pipeline::decode_last_encoded(std::span<const std::byte> payload, std::span<float> out) {
  if (!last_raw_ || last_raw_->values != out.size() || payload.data() != last_raw_->payload ||
      payload.size() != last_raw_->payload_size)
    return decode(payload, out);
  // The byte codec is lossless: its input, kept from the encode, decodes to
  // the same values as its output would.
  return decode_raw(stages_, std::span<const std::byte>(raw_scratch_).first(last_raw_->bytes), out, values_scratch_);
}

Status Pipeline::check_header(std::span<const std::byte> payload, std::size_t values) const {
  auto h = own_header(payload);
  if (!h.ok()) return h.status();
  GEOLOCO_RETURN_IF(h->element_count != values, Err::mismatch, "payload: holds ", h->element_count,
                    " values, the receiver expects ", values);
  return {};
}

Status decode_payload(std::span<const std::byte> payload, std::span<float> out, Simd simd) {
  auto h = parse_payload_header(payload);
  if (!h.ok()) return h.status();
  auto stages = stages_from_descriptor(*h, simd);
  if (!stages.ok()) return stages.status();
  std::vector<float> values_scratch;
  std::vector<std::byte> raw_scratch;
  return decode_body(*stages, *h, out, values_scratch, raw_scratch);
}

Result<PayloadInfo> inspect_payload(std::span<const std::byte> payload) {
  auto h = parse_payload_header(payload);
  if (!h.ok()) return h.status();
  auto stages = stages_from_descriptor(*h, Simd::scalar);
  if (!stages.ok()) return stages.status();
  PayloadInfo info;
  info.element_count = h->element_count;
  info.payload_size = payload.size();
  for (const Codec* c :
       {static_cast<const Codec*>(stages->sparsifier.get()), static_cast<const Codec*>(stages->value.get()),
        static_cast<const Codec*>(stages->bytes.get())}) {
    if (c == nullptr) continue;
    if (!info.chain.empty()) info.chain += " | ";
    info.chain += c->describe();
  }
  if (info.chain.empty()) info.chain = "raw";
  return info;
}

}  // namespace geoloco::compression
