// Ports are taken off the addresses in a log line, and nothing else.
#include <catch2/catch.hpp>

#include "common/host_port.h"

using namespace geoloco;

TEST_CASE("without_ports leaves the hosts and drops their ports", "[sanitize]") {
  CHECK(without_ports("refused 127.0.0.1:53122: TLS handshake with 127.0.0.1:53122 failed: timed out") ==
        "refused 127.0.0.1: TLS handshake with 127.0.0.1 failed: timed out");
  CHECK(without_ports("[::1]:4000 closed") == "[::1] closed");
  CHECK(without_ports("10.1.2.3:7") == "10.1.2.3");
  // Not addresses: left alone.
  CHECK(without_ports("round 12: attempt 3") == "round 12: attempt 3");
  CHECK(without_ports("site-a:7001") == "site-a:7001");
  CHECK(without_ports("v1.2.3.4:80") == "v1.2.3.4:80");
  CHECK(without_ports("1.2.3:80 and 1.2.3.4.5:80") == "1.2.3:80 and 1.2.3.4.5:80");
  CHECK(without_ports("1.2.3.4:80x") == "1.2.3.4:80x");
  CHECK(without_ports("ends with a colon 1.2.3.4:") == "ends with a colon 1.2.3.4:");
  CHECK(without_ports("") == "");
}
