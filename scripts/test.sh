#!/usr/bin/env bash
# Builds geoloco and runs the whole test suite (ctest): the main build with
# warnings as errors, then an ASan+UBSan build of the code that parses and
# decodes untrusted input, with its libFuzzer targets when clang is present,
# then a ThreadSanitizer build of the transport, whose connections run on
# several threads.
#
#   scripts/test.sh            the suite (what CI runs)
#   scripts/test.sh --long     also the opt-in long suites (label "long")
#   scripts/test.sh --install  also installs the .deb on this machine with apt,
#                              runs it and purges it (label "install"; root)
# Environment: JOBS (parallel build jobs, default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

long=0
install=0
for arg in "$@"; do
  case "$arg" in
    --long) long=1 ;;
    --install) install=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
jobs=${JOBS:-$(nproc)}

echo "== main build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGEOLOCO_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

echo "== sanitizer build (build-sanitize/)"
sanitize_cc=()
if command -v clang++ >/dev/null; then
  sanitize_cc=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGEOLOCO_FUZZ=ON)
else
  echo "test.sh: clang not found, sanitizer build uses g++ and skips the fuzzers" >&2
fi
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DGEOLOCO_SANITIZE=ON -DGEOLOCO_CUDA=OFF \
  -DGEOLOCO_WERROR=ON "${sanitize_cc[@]}" >/dev/null
cmake --build build-sanitize -j "$jobs" --target geoloco_sanitize_tests

echo "== thread sanitizer build (build-tsan/)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEOLOCO_TSAN=ON -DGEOLOCO_CUDA=OFF \
  -DGEOLOCO_WERROR=ON >/dev/null
cmake --build build-tsan -j "$jobs" --target geoloco_thread_tests

echo "== tests"
# ctest -LE takes a regular expression of the labels to leave out.
left_out=()
[ "$long" = 1 ] || left_out+=(long)
[ "$install" = 1 ] || left_out+=(install)
exclude=()
[ ${#left_out[@]} -gt 0 ] && exclude=(-LE "^($(IFS='|'; echo "${left_out[*]}"))\$")
# The end of each failed test's output, again after everything: a long run's
# log is often read from its last lines only.
failed_dirs=()
summarize_failures() {
  local dir=$1 log=$1/Testing/Temporary/LastTest.log
  [ -f "$dir/Testing/Temporary/LastTestsFailed.log" ] || return 0
  while IFS=: read -r _ name; do
    echo "---- $dir: $name failed; the last lines of its output:"
    awk -v t="$name" '$0 ~ ("^[0-9]+/[0-9]+ Testing: " t "$") {on=1; next}
      on && /^<end of output>$/ {exit} on' "$log" | tail -n 25
  done <"$dir/Testing/Temporary/LastTestsFailed.log"
}
ctest --test-dir build --output-on-failure -j "$jobs" "${exclude[@]}" || failed_dirs+=(build)
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -L sanitize || failed_dirs+=(build-sanitize)
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L threads || failed_dirs+=(build-tsan)
[ ${#failed_dirs[@]} -eq 0 ] && exit 0
echo "== failures"
for dir in "${failed_dirs[@]}"; do summarize_failures "$dir"; done
exit 1
