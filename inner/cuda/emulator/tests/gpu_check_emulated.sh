#!/usr/bin/env bash
# scripts/gpu-check.sh --emulator as a test: the GPU check's steps run on the
# CUDA emulator's builds, so a broken step (a test, the benchmark, the two
# geoloco-train runs, the parsing of their output) shows here and not on a
# lent GPU. Passes when the script passes, prints its summary line in full,
# and leaves no stray file in the repository's top folder.
#
# Usage: gpu_check_emulated.sh BUILD_DIR   (run by ctest from the repository root)
set -uo pipefail
build=$1
cd "$(dirname "$0")/../../../.."
before=$(ls -A)
out=$(GEOLOCO_GPU_BUILD_DIR="${build}" scripts/gpu-check.sh --emulator 2>&1)
rc=$?
after=$(ls -A)
printf '%s\n' "${out}" | grep -v '^geoloco CUDA emulator:'
fail=0
if [ "${rc}" -ne 0 ]; then
  echo "FAIL: gpu-check.sh --emulator exited ${rc}"
  fail=1
fi
summary='--backend cuda [0-9]+ tokens/s, --backend cpu [0-9]+ tokens/s \([0-9]+\.[0-9]x\); eval loss cuda [0-9.]+, cpu [0-9.]+$'
if ! grep -Eq -- "${summary}" <<<"${out}"; then
  echo "FAIL: no complete summary line (tokens/s of both backends, their ratio, both eval losses)"
  fail=1
fi
if ! grep -q '=== gpu-check: total [0-9]*s, PASSED' <<<"${out}"; then
  echo "FAIL: the script did not report PASSED"
  fail=1
fi
if [ "${before}" != "${after}" ]; then
  echo "FAIL: the script left files in the repository's top folder:"
  diff <(printf '%s\n' "${before}") <(printf '%s\n' "${after}")
  fail=1
fi
exit "${fail}"
