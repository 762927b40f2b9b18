// Error reporting shared by every geoloco library: a short list of error
// codes, a Status that carries one with a message and the file:line that
// raised it, and Result<T> for functions that return a value or an error.
//
// Public functions document which codes they return. Nothing here throws or
// exits: a daemon survives a peer's bad input, and only main() decides to stop.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace geoloco {

/// The error codes. Keep the list short: callers branch on these, users read
/// the message.
enum class Err : std::uint8_t {
  ok = 0,
  invalid_argument,  ///< the caller passed a value that breaks a documented rule
  malformed,         ///< input bytes do not follow the format (bad magic, bad field)
  truncated,         ///< input ends before the format says it should
  mismatch,          ///< well-formed, but not what the caller expected (size, codec chain)
  too_large,         ///< a length over a configured bound, refused before allocating
  unsupported,       ///< a version or feature this build does not know
  non_finite,        ///< NaN or Inf where only finite numbers are allowed
  io,                ///< the operating system refused a read, write or call
  timeout,           ///< a deadline passed
  internal,          ///< a bug in geoloco: please report it
};

/// Stable lower-case name of a code, e.g. "truncated".
std::string_view err_name(Err code);

/// Concatenates its arguments with operator<< into a string.
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

/// An error code with a human-readable message and where it was raised.
/// A default-constructed Status is success.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Err code, std::string message, const char* file = nullptr, int line = 0)
      : code_(code), message_(std::move(message)), file_(file), line_(line) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == Err::ok; }
  explicit operator bool() const { return ok(); }
  Err code() const { return code_; }
  /// The message alone, written for a user ("payload truncated: ...").
  const std::string& message() const { return message_; }
  /// "code: message (file:line)", for logs.
  std::string to_string() const;

 private:
  Err code_ = Err::ok;
  std::string message_;
  const char* file_ = nullptr;
  int line_ = 0;
};

/// A value or an error. `ok()` says which; `value()` is only valid when ok.
template <class T>
class [[nodiscard]] Result {
 public:
  /// An empty result: an internal error until assigned (needed by futures).
  Result() : v_(Status(Err::internal, "no result was produced")) {}
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  /// The error; success when the result holds a value.
  const Status& status() const {
    static const Status success;
    return ok() ? success : std::get<Status>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace geoloco

/// Makes a Status that records this file and line.
#define GEOLOCO_ERROR(code, ...) ::geoloco::Status((code), ::geoloco::cat(__VA_ARGS__), __FILE__, __LINE__)

/// Returns an error Status from the enclosing function when `cond` holds.
#define GEOLOCO_RETURN_IF(cond, code, ...)             \
  do {                                                 \
    if (cond) return GEOLOCO_ERROR(code, __VA_ARGS__); \
  } while (0)

/// Evaluates an expression yielding Status and returns it when it is an error.
#define GEOLOCO_TRY(expr)                                      \
  do {                                                         \
    ::geoloco::Status geoloco_try_status_ = (expr);            \
    if (!geoloco_try_status_.ok()) return geoloco_try_status_; \
  } while (0)
