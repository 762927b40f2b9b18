// Quantities as every command, the site file and the environment take them.
#include <catch2/catch.hpp>

#include "common/units.h"

using namespace geoloco;

TEST_CASE("rates and sizes: decimal and binary suffixes, plain base units, the rest refused with what is accepted") {
  CHECK(*parse_rate("100M") == 100e6);
  CHECK(*parse_rate("1.5G") == 1.5e9);
  CHECK(*parse_rate("2k") == 2e3);
  CHECK(*parse_rate("2K") == 2e3);
  CHECK(*parse_rate("1Ti") == 1099511627776.0);
  CHECK(*parse_rate("250") == 250);
  CHECK(parse_rate("0").status().code() == Err::invalid_argument);  // a rate is > 0
  CHECK(parse_rate("-5M").status().code() == Err::invalid_argument);
  CHECK(parse_rate("fast").status().message() ==
        "'fast': expected a number > 0 with an optional suffix k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers "
        "of 1024)");
  CHECK(parse_rate("10Mb").status().message() ==
        "'10Mb': unknown suffix 'Mb' (k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024))");
  CHECK(parse_rate("inf").status().code() == Err::invalid_argument);

  CHECK(*parse_rate_cap("0") == 0);
  CHECK(*parse_rate_cap("0M") == 0);
  CHECK(*parse_rate_cap("0.0") == 0);
  CHECK(*parse_rate_cap("900M") == 900e6);
  CHECK(*parse_rate_cap("1000") == 1000);
  CHECK(parse_rate_cap("900").status().message() ==
        "'900': a cap of 900 bit/s is below 1 kbit/s; rates are bit/s with a suffix (e.g. 900M), or 0 for no cap");
  CHECK(parse_rate_cap("0X").status().code() == Err::invalid_argument);
  CHECK(parse_rate_cap("-1").status().message().find(", or 0 for no cap") != std::string::npos);

  CHECK(*parse_size("64Mi") == 64ull << 20);
  CHECK(*parse_size("268435456") == 268435456ull);
  CHECK(*parse_size("1.5k") == 1500);
  CHECK(parse_size("1.5").status().message() == "'1.5': a size is a whole number of bytes");
  CHECK(parse_size("0").status().code() == Err::invalid_argument);
}

TEST_CASE("counts: 0, or a quantity rounded to a whole number") {
  CHECK(*parse_count("0") == 0.0);
  CHECK(*parse_count("7G") == 7e9);
  CHECK(*parse_count("8.03G") == 8030000000.0);  // 8.03 x 1e9 is 8029999999.99... in binary
  CHECK(*parse_count("1.3e9") == 1.3e9);
  CHECK(*parse_count("1M") == 1e6);
  CHECK(parse_count("-5").status().code() == Err::invalid_argument);
  CHECK(parse_count("7B").status().message().find("unknown suffix 'B'") != std::string::npos);
  CHECK(parse_count("").status().code() == Err::invalid_argument);
}
