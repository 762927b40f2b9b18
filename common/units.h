// Quantities, written one way everywhere (the command line, the site file,
// the environment): a number with an optional suffix, decimal k M G T
// (10^3 … 10^12) or binary Ki Mi Gi Ti (2^10 … 2^40). Rates are bit/s
// (`--bandwidth 100M`, `rate_limit: 1G`), sizes bytes (`--size 64Mi`, or a
// plain 268435456).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace geoloco {

/// A rate in bit/s, > 0. Errors: invalid_argument saying what is accepted.
Result<double> parse_rate(const std::string& text);
/// A cap on a rate in bit/s: 0 (no cap, any suffix) or a rate as
/// parse_rate takes it, at least 1k (a smaller one is a unit slip: 900 for
/// 900M). Errors: invalid_argument.
Result<double> parse_rate_cap(const std::string& text);
/// A size in bytes, a whole number >= 1. Errors: invalid_argument.
Result<std::uint64_t> parse_size(const std::string& text);
/// A count (parameters, tokens): 0, or a quantity as parse_rate takes it,
/// rounded to the nearest whole number (8.03G is 8030000000). Errors:
/// invalid_argument.
Result<double> parse_count(const std::string& text);

}  // namespace geoloco
