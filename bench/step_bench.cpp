#include "bench/step_bench.h"

#include <algorithm>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <thread>

#include "bench/timing.h"
#include "common/digest.h"
#include "compression/pipeline.h"
#include "compression/synthetic_gradient.h"
#include "diloco/chunked_step.h"
#include "transport/allreduce.h"

namespace geoloco::bench {

namespace {

constexpr std::uint64_t kChunk = 1u << 18;  // the all-reduce's chunk (transport/options.h)

compression::PipelineSpec pipeline_of(bool raw) {
  if (raw) return {};
  return compression::PipelineSpec{
      {compression::QuantizeSpec{8, 128, compression::Rounding::nearest}, compression::ZstdSpec{3}}};
}

// Δ encoded chunk by chunk, as an owner's all-gather leaves it.
Result<transport::EncodedOutput> encoded_delta(std::uint64_t n, std::uint64_t seed, bool raw) {
  std::vector<float> delta(n);
  compression::fill_synthetic_gradient(delta, seed);
  transport::EncodedOutput out;
  out.values = n;
  out.pipeline = pipeline_of(raw);
  auto codec = compression::Pipeline::create(out.pipeline);
  if (!codec.ok()) return codec.status();
  for (std::uint64_t begin = 0; begin < n; begin += kChunk) {
    const std::uint64_t size = std::min(kChunk, n - begin);
    Buffer bytes(codec->max_encoded_size(size));
    auto written = codec->encode(std::span<const float>(delta).subspan(begin, size), bytes, begin / kChunk);
    if (!written.ok()) return written.status();
    bytes.resize(*written);
    out.ranges.push_back({begin, size});
    out.chunks.push_back(std::move(bytes));
    out.sources.push_back("bench");
  }
  return out;
}

}  // namespace

Result<std::vector<StepBenchRow>> run_step_bench(const StepBenchOptions& options) {
  GEOLOCO_RETURN_IF(options.values < kChunk, Err::invalid_argument, "bench step: --values must be at least ", kChunk,
                    " (one chunk)");
  GEOLOCO_RETURN_IF(options.repeats < 1, Err::invalid_argument, "bench step: --repeats must be at least 1");
  std::vector<unsigned> counts = options.threads;
  if (counts.empty()) counts = {1, diloco::default_pass_threads()};
  for (unsigned t : counts)
    GEOLOCO_RETURN_IF(t < 1 || t > 256, Err::invalid_argument, "bench step: thread counts are 1..256, got ", t);
  counts.push_back(1);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  const std::uint64_t n = options.values;
  auto delta = encoded_delta(n, options.seed, options.raw);
  if (!delta.ok()) return delta.status();
  std::vector<float> anchor(n), momentum(n);
  std::mt19937 rng(static_cast<std::uint32_t>(options.seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : anchor) v = normal(rng);
  for (auto& v : momentum) v = 0.01f * normal(rng);
  std::vector<float> a(n), m(n);
  diloco::OuterOptimizerOptions outer;  // Nesterov, the job defaults
  const double gb = 4.0 * static_cast<double>(n) / 1e9;

  std::vector<StepBenchRow> rows;
  for (unsigned threads : counts) {
    StepBenchRow row;
    row.threads = threads;
    Status failure;
    std::uint64_t foretold = 0, stepped = 0;
    row.digest_seconds = best_seconds(options.repeats, [&] {
      auto d = diloco::stepped_anchor_digest(anchor, momentum, 0, n, delta->chunk_list(), outer, 1.0f, threads);
      if (d.ok()) foretold = *d;
      else failure = d.status();
    });
    // Each step from the same state: the copy is made outside the timing.
    double best = 0;
    for (int r = 0; r < options.repeats && failure.ok(); ++r) {
      std::copy(anchor.begin(), anchor.end(), a.begin());
      std::copy(momentum.begin(), momentum.end(), m.begin());
      const double took = best_seconds(1, [&] {
        auto d = diloco::step_chunks_digest(a, m, 0, n, delta->chunk_list(), outer, 1.0f, threads);
        if (d.ok()) stepped = *d;
        else failure = d.status();
      });
      best = r == 0 ? took : std::min(best, took);
    }
    if (!failure.ok()) return failure;
    row.step_seconds = best;
    row.anchor_digest = digest_hex(stepped);
    row.same_bits = foretold == stepped && stepped == digest_f32(a) &&
                    (rows.empty() || row.anchor_digest == rows.front().anchor_digest);
    row.digest_gbps = gb / row.digest_seconds;
    row.step_gbps = gb / row.step_seconds;
    const StepBenchRow& one = rows.empty() ? row : rows.front();
    row.digest_speedup = one.digest_seconds / row.digest_seconds;
    row.step_speedup = one.step_seconds / row.step_seconds;
    rows.push_back(row);
  }
  return rows;
}

void print_step_json(const std::vector<StepBenchRow>& rows, std::ostream& out) {
  for (const auto& r : rows)
    out << nlohmann::json{{"threads", r.threads},           {"digest_seconds", r.digest_seconds},
                          {"step_seconds", r.step_seconds}, {"digest_speedup", r.digest_speedup},
                          {"step_speedup", r.step_speedup}, {"digest_gbps", r.digest_gbps},
                          {"step_gbps", r.step_gbps},       {"anchor_digest", r.anchor_digest},
                          {"same_bits", r.same_bits}}
               .dump()
        << '\n';
}

void print_step_table(const std::vector<StepBenchRow>& rows, const StepBenchOptions& options, std::ostream& out) {
  const std::uint64_t chunks = (options.values + kChunk - 1) / kChunk;
  out << "The passes over the model that end a round: " << options.values << " values (" << std::setprecision(3)
      << 4.0 * static_cast<double>(options.values) / 1e9 << " GB of fp32), Δ as " << chunks
      << (options.raw ? " raw fp32" : " q8 + zstd") << " chunks; this machine has "
      << std::thread::hardware_concurrency() << " cores; the fastest of " << options.repeats << ".\n";
  out << std::left << std::setw(8) << "threads" << std::right << std::setw(10) << "digest s" << std::setw(8) << "GB/s"
      << std::setw(8) << "x 1" << std::setw(10) << "step s" << std::setw(8) << "GB/s" << std::setw(8) << "x 1"
      << "  anchor digest     same bits\n";
  out << std::fixed;
  for (const auto& r : rows)
    out << std::left << std::setw(8) << r.threads << std::right << std::setprecision(3) << std::setw(10)
        << r.digest_seconds << std::setprecision(2) << std::setw(8) << r.digest_gbps << std::setw(8) << r.digest_speedup
        << std::setprecision(3) << std::setw(10) << r.step_seconds << std::setprecision(2) << std::setw(8)
        << r.step_gbps << std::setw(8) << r.step_speedup << "  " << r.anchor_digest << "  "
        << (r.same_bits ? "yes" : "NO") << '\n';
  out << "(x 1: the one-thread pass's seconds over this row's, measured in the same run; same bits: the vote's\n"
         "digest equals the step's, and the anchor equals the one-thread anchor)\n";
}

}  // namespace geoloco::bench
