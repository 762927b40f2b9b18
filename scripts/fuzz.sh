#!/usr/bin/env bash
# Runs every libFuzzer target for longer than the suite does (the suite
# replays each for a fixed number of inputs: ctest -L fuzz). Needs the
# sanitizer build with clang (scripts/test.sh makes it in build-sanitize/).
#
#   scripts/fuzz.sh [--seconds N]    N seconds per fuzzer (default 60)
# New inputs go to build-sanitize/fuzz-runs/<fuzzer>/, never into the tree;
# a crash leaves its input there and makes the script fail.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
build=build-sanitize
if [ ! -f "$build/CTestTestfile.cmake" ]; then
  echo "fuzz.sh: no sanitizer build in $build (run scripts/test.sh first)" >&2
  exit 2
fi
# The fuzzers and their seed corpora, as ctest registers them: each test's
# command names the binary and, last, its corpus.
mapfile -t tests < <(ctest --test-dir "$build" -L fuzz -N | sed -n 's/^ *Test *#[0-9]*: //p')
[ ${#tests[@]} -gt 0 ] || { echo "fuzz.sh: no fuzzers in $build (it needs clang: GEOLOCO_FUZZ=ON)" >&2; exit 2; }
failed=0
for name in "${tests[@]}"; do
  binary=$(find "$build" -type f -name "$name" -perm -u+x -print -quit)
  corpus=$(ctest --test-dir "$build" -R "^$name\$" --show-only=json-v1 |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["tests"][0]["command"][-1].split()[-1])')
  out="$build/fuzz-runs/$name"
  mkdir -p "$out"
  echo "== $name: $seconds s (corpus $corpus)"
  if ! (cd "$out" && "$OLDPWD/$binary" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 . "$corpus" \
        2>&1 | tail -4); then
    failed=$((failed + 1))
  fi
done
[ $failed -eq 0 ] && echo "== fuzz.sh: ${#tests[@]} fuzzers, no crash" || { echo "== fuzz.sh: $failed fuzzer(s) crashed"; exit 1; }
