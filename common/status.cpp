#include "common/status.h"

namespace geoloco {

std::string_view err_name(Err code) {
  switch (code) {
    case Err::ok:
      return "ok";
    case Err::invalid_argument:
      return "invalid_argument";
    case Err::malformed:
      return "malformed";
    case Err::truncated:
      return "truncated";
    case Err::mismatch:
      return "mismatch";
    case Err::too_large:
      return "too_large";
    case Err::unsupported:
      return "unsupported";
    case Err::non_finite:
      return "non_finite";
    case Err::io:
      return "io";
    case Err::timeout:
      return "timeout";
    case Err::internal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s = cat(err_name(code_), ": ", message_);
  if (file_ != nullptr) s += cat(" (", file_, ":", line_, ")");
  return s;
}

}  // namespace geoloco
