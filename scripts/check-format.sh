#!/usr/bin/env bash
# Checks that every C++ and CUDA source git tracks is formatted as
# .clang-format says, by clang-format 14 (Debian 12's: another version may
# place a few lines otherwise, so the check runs with 14 only).
#
#   scripts/check-format.sh          # exit 0: formatted; 1: the files that are not
#   scripts/check-format.sh --fix    # formats them in place
#
# Exit 77 (a skip, for ctest) where it cannot check: no git checkout (a
# release tarball) or no clang-format 14.
set -euo pipefail
cd "$(dirname "$0")/.."
formatter=""
for f in clang-format-14 clang-format; do
  if command -v "$f" >/dev/null && "$f" --version | grep 'version 14\.' >/dev/null; then formatter=$f; break; fi
done
if [ -z "$formatter" ]; then
  echo "check-format: SKIPPED: needs clang-format 14 (apt-get install clang-format on Debian 12)"
  exit 77
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-format: SKIPPED: not a git checkout, so which files are sources is not known"
  exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  printf '%s\0' "${files[@]}" | xargs -0 "$formatter" -i
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:"
  printf '  %s\n' "${bad[@]}"
  echo "check-format: scripts/check-format.sh --fix formats them"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says"
