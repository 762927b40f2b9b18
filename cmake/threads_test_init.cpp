// Linked into every THREADS test (geoloco_test.cmake).
//
// spdlog makes its default logger on the first call that logs, inside the
// uninstrumented libspdlog. When that first call comes from a thread a test
// started while another thread logs too, ThreadSanitizer sees the logger's
// fields read without the creation that wrote them. Making the logger here,
// during static initialization on the main thread, puts its creation before
// every thread any test starts, so no suppression has to hide such reads.
#include <spdlog/spdlog.h>

namespace {

const bool g_default_logger_made = (spdlog::default_logger_raw() != nullptr);

}  // namespace
