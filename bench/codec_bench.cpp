#include "bench/codec_bench.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>

#include "bench/timing.h"
#include "compression/chunked.h"
#include "compression/pipeline.h"
#include "compression/synthetic_gradient.h"

namespace geoloco::bench {

namespace {

using compression::Pipeline;
using compression::StageSpec;

struct Case {
  std::string name;
  std::vector<StageSpec> stages;
};

std::vector<Case> cases() {
  using namespace compression;
  return {
      {"fp16", {Fp16Spec{}}},
      {"bf16", {Bf16Spec{}}},
      {"quantize(8)", {QuantizeSpec{8, 128, Rounding::nearest}}},
      {"quantize(4)", {QuantizeSpec{4, 128, Rounding::nearest}}},
      {"quantize(2)", {QuantizeSpec{2, 128, Rounding::nearest}}},
      {"quantize(8,stochastic)", {QuantizeSpec{8, 128, Rounding::stochastic}}},
      {"topk(0.01)", {TopkSpec{0.01, 4096}}},
      {"zstd(3)", {ZstdSpec{3}}},
      // The jobs' usual chain (quantize 8 bits, then zstd), at zstd's default and faster levels.
      {"quantize(8)|zstd(3)", {QuantizeSpec{8, 128, Rounding::nearest}, ZstdSpec{3}}},
      {"quantize(8)|zstd(1)", {QuantizeSpec{8, 128, Rounding::nearest}, ZstdSpec{1}}},
      {"quantize(8)|zstd(-1)", {QuantizeSpec{8, 128, Rounding::nearest}, ZstdSpec{-1}}},
      {"topk(0.01)|quantize(4)|zstd", {TopkSpec{0.01, 4096}, QuantizeSpec{4, 128, Rounding::nearest}, ZstdSpec{3}}},
  };
}

}  // namespace

Result<std::vector<CodecBenchRow>> run_codec_bench(const CodecBenchOptions& options) {
  const std::size_t n = options.size_bytes / sizeof(float);
  GEOLOCO_RETURN_IF(n < 1024, Err::invalid_argument, "bench codecs: --size must be at least 4096 bytes");
  GEOLOCO_RETURN_IF(options.repeats < 1, Err::invalid_argument, "bench codecs: repeats must be at least 1");

  std::vector<float> input(n), output(n), copy(n);
  compression::fill_synthetic_gradient(input, options.seed);
  const double bytes = static_cast<double>(n) * sizeof(float);

  std::memcpy(copy.data(), input.data(), bytes);  // touch every page before timing
  const double memcpy_s = best_seconds(options.repeats, [&] { std::memcpy(copy.data(), input.data(), bytes); });
  const double memcpy_gbps = bytes / memcpy_s / 1e9;

  // Chunk by chunk, as the transport sends it.
  const compression::ChunkLayout layout{n, compression::kDefaultChunkElements};
  std::vector<CodecBenchRow> rows;
  for (const auto& c : cases()) {
    auto pipeline = Pipeline::create(compression::PipelineSpec{c.stages});
    if (!pipeline.ok()) return pipeline.status();
    Pipeline& p = *pipeline;
    const std::size_t slot = p.max_encoded_size(static_cast<std::size_t>(layout.chunk));
    std::vector<std::byte> encoded(slot * layout.count());
    std::vector<std::size_t> sizes(layout.count());
    Status failure;

    auto encode_all = [&] {
      for (std::uint64_t i = 0; i < layout.count() && failure.ok(); ++i) {
        auto in = std::span<const float>(input).subspan(layout.offset(i), layout.length(i));
        auto size = p.encode(in, std::span(encoded).subspan(i * slot, slot), i);
        if (!size.ok()) failure = size.status();
        else sizes[i] = *size;
      }
    };
    auto decode_all = [&] {
      for (std::uint64_t i = 0; i < layout.count() && failure.ok(); ++i) {
        auto out = std::span<float>(output).subspan(layout.offset(i), layout.length(i));
        Status s = p.decode(std::span<const std::byte>(encoded).subspan(i * slot, sizes[i]), out);
        if (!s.ok()) failure = s;
      }
    };
    encode_all();  // warm-up: scratch buffers and pages
    decode_all();
    const double encode_s = best_seconds(options.repeats, encode_all);
    const double decode_s = best_seconds(options.repeats, decode_all);
    if (!failure.ok()) return failure;

    double encoded_bytes = 0, err = 0, ref = 0;
    for (auto s : sizes) encoded_bytes += static_cast<double>(s);
    for (std::size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(input[i]) - output[i];
      err += d * d;
      ref += static_cast<double>(input[i]) * input[i];
    }
    rows.push_back({c.name, bytes / encode_s / 1e9, bytes / decode_s / 1e9, bytes / encoded_bytes, std::sqrt(err / ref),
                    memcpy_gbps});
  }
  return rows;
}

void print_codec_json(const std::vector<CodecBenchRow>& rows, std::ostream& out) {
  for (const auto& r : rows) {
    nlohmann::json j{{"codec", r.codec}, {"encode_gbps", r.encode_gbps},   {"decode_gbps", r.decode_gbps},
                     {"ratio", r.ratio}, {"rel_l2_error", r.rel_l2_error}, {"memcpy_gbps", r.memcpy_gbps}};
    out << j.dump() << '\n';
  }
}

void print_codec_table(const std::vector<CodecBenchRow>& rows, std::size_t size_bytes, std::ostream& out) {
  out << "codecs on " << size_bytes / (1u << 20) << " MiB of fp32 pseudo-gradient, 1 Mi-value chunks, one core\n";
  out << std::left << std::setw(30) << "codec" << std::right << std::setw(12) << "enc GB/s" << std::setw(10)
      << "x memcpy" << std::setw(12) << "dec GB/s" << std::setw(10) << "ratio" << std::setw(14) << "rel L2 err" << '\n';
  for (const auto& r : rows) {
    out << std::left << std::setw(30) << r.codec << std::right << std::fixed << std::setprecision(2) << std::setw(12)
        << r.encode_gbps << std::setw(10) << r.encode_gbps / r.memcpy_gbps << std::setw(12) << r.decode_gbps
        << std::setw(10) << std::setprecision(1) << r.ratio << std::setw(14) << std::scientific << std::setprecision(2)
        << r.rel_l2_error << std::defaultfloat << '\n';
  }
  if (rows.empty()) return;
  out << std::fixed << std::setprecision(2) << "memcpy: " << rows.front().memcpy_gbps << " GB/s\n";
  for (const auto& r : rows) {
    if (r.codec == "quantize(8)") {
      const double x = r.encode_gbps / r.memcpy_gbps;
      out << "target quantize(8) encode >= 0.50 x memcpy: " << x << " x  " << (x >= 0.5 ? "met" : "MISSED") << '\n';
    }
    if (r.codec == "topk(0.01)|quantize(4)|zstd") {
      out << "target pipeline encode >= 1.00 GB/s: " << r.encode_gbps << " GB/s  "
          << (r.encode_gbps >= 1.0 ? "met" : "MISSED") << '\n';
    }
  }
  out << std::defaultfloat;
}

}  // namespace geoloco::bench
