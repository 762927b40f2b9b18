// The one Catch2 main shared by every test executable.
//
// A case that cannot run here says so with WARN("SKIPPED: why"). The
// executable then exits 77, which ctest reports as a skip (SKIP_RETURN_CODE),
// but only when every case that ran passed: a failure anywhere in the
// executable exits non-zero as Catch2 decides, and ctest reports it failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <string>

namespace {

bool g_skipped = false;

struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  bool assertionEnded(Catch::AssertionStats const& stats) override {
    const auto& r = stats.assertionResult;
    if (r.getResultType() == Catch::ResultWas::Warning && r.getMessage().rfind("SKIPPED: ", 0) == 0) g_skipped = true;
    return true;
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char* argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed != 0) return failed;
  return g_skipped ? 77 : 0;
}
