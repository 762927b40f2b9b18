// `geoloco bench codecs`: encode and decode throughput, compression ratio and
// error of every codec and of the reference pipeline, on a buffer shaped like
// a pseudo-gradient, next to memcpy of the same buffer measured in the same
// run (figures are ratios, never absolute claims about a noisy machine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::bench {

struct CodecBenchOptions {
  std::size_t size_bytes = 64u << 20;  ///< fp32 buffer size in bytes (rounded down to whole floats)
  int repeats = 5;                     ///< timed passes per figure; the fastest counts
  std::uint64_t seed = 1;              ///< synthetic gradient seed
};

struct CodecBenchRow {
  std::string codec;        ///< the chain, e.g. "topk(0.01)|quantize(4)|zstd"
  double encode_gbps = 0;   ///< fp32 input bytes / encode seconds / 1e9
  double decode_gbps = 0;   ///< fp32 output bytes / decode seconds / 1e9
  double ratio = 0;         ///< fp32 bytes / encoded bytes (headers included)
  double rel_l2_error = 0;  ///< ||x - D(C(x))|| / ||x||
  double memcpy_gbps = 0;   ///< memcpy of the same buffer, same run
};

/// Runs every codec. Errors: invalid_argument (size below one chunk of
/// 4 KiB or repeats < 1), or a codec's own error (a bug).
Result<std::vector<CodecBenchRow>> run_codec_bench(const CodecBenchOptions& options);

/// One JSON object per row and line, with the keys of CodecBenchRow.
void print_codec_json(const std::vector<CodecBenchRow>& rows, std::ostream& out);
/// A table, then the codecs' speed targets with the measured figure next to each.
void print_codec_table(const std::vector<CodecBenchRow>& rows, std::size_t size_bytes, std::ostream& out);

}  // namespace geoloco::bench
