// Quantities on the command line, one way for every command: a number with
// an optional suffix, decimal k M G T (10^3 … 10^12) or binary Ki Mi Gi Ti
// (2^10 … 2^40). Rates are bit/s (`--bandwidth 100M`), sizes bytes
// (`--size 64Mi`, or a plain 268435456).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace geoloco::cli {

/// A rate in bit/s, > 0. Errors: invalid_argument saying what is accepted.
Result<double> parse_rate(const std::string& text);
/// A size in bytes, a whole number >= 1. Errors: invalid_argument.
Result<std::uint64_t> parse_size(const std::string& text);

}  // namespace geoloco::cli
