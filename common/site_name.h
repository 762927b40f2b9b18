// What a site may be called, the one rule every file and certificate that
// names a site follows: 1 to 64 characters of a-z, 0-9, '-' and '.' (a DNS
// label's alphabet, so a name can be a certificate's DNS name).
#pragma once

#include <string>

namespace geoloco {

/// Why `name` cannot name a site, or "" when it can.
std::string site_name_problem(const std::string& name);

}  // namespace geoloco
