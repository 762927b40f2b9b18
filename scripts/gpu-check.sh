#!/usr/bin/env bash
# gpu-check.sh: the ONE check to run on a machine with a GPU (issue 5).
#
#   1. configures and builds the CUDA backend (build-gpu/, Release), only the
#      two targets it needs;
#   2. runs the CUDA backend test: every op, the mlp and gpt runners and a
#      one-rank NCCL group against the CPU reference (inner/cuda/tests/);
#   3. runs geoloco-gpu-bench: gpt training throughput (tokens/s) and MFU,
#      fp32 and TF32, next to a cuBLAS gemm timed in the same run.
#
# Every figure goes to stdout. Each step runs under `timeout`; the bounds add
# up to 7.5 minutes, so the whole check ends in under 8 on an H200 host with
# 16 cores (expected: about 3 minutes, most of it the build). Exits non-zero
# if a step fails, times out, or the test finds no GPU (here a skip would
# mean the check checked nothing).
#
# Usage: scripts/gpu-check.sh            (from anywhere in the repository)
#   GEOLOCO_TF32_PEAK_TFLOPS=...  the datasheet TF32 peak for the TF32 MFU
#                                 line (default: 494.7 on an H100/H200, dense)
set -uo pipefail

cd "$(dirname "$0")/.."
build=${GEOLOCO_GPU_BUILD_DIR:-build-gpu}  # overridable, to smoke-test the script against an existing build
jobs=$(nproc)
start=$(date +%s)
failed=0

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== gpu-check: ${name} (limit ${limit}s)"
  local t0=$(date +%s)
  timeout --kill-after=10 "${limit}" "$@"
  local rc=$?
  echo "=== gpu-check: ${name}: exit ${rc} after $(( $(date +%s) - t0 ))s"
  [ "${rc}" -eq 124 ] && echo "=== gpu-check: ${name} TIMED OUT"
  return "${rc}"
}

finish() {
  echo "=== gpu-check: total $(( $(date +%s) - start ))s, $([ "${failed}" -eq 0 ] && echo PASSED || echo FAILED)"
  exit "${failed}"
}

if command -v nvidia-smi >/dev/null; then
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
else
  echo "=== gpu-check: nvidia-smi not found; relying on the CUDA runtime to find the GPU"
fi

step configure 60 cmake -S . -B "${build}" -DGEOLOCO_CUDA=ON -DCMAKE_BUILD_TYPE=Release || { failed=1; finish; }
step build 240 cmake --build "${build}" -j"${jobs}" --target inner_cuda_backend_test geoloco-gpu-bench \
  || { failed=1; finish; }

log=$(mktemp)
step "CUDA backend test (vs the CPU reference)" 60 "${build}/tests/inner_cuda_backend_test" --durations yes 2>&1 \
  | tee "${log}"
test_rc=${PIPESTATUS[0]}
if [ "${test_rc}" -ne 0 ]; then
  failed=1
elif grep -q "SKIPPED: no CUDA device" "${log}"; then
  echo "=== gpu-check: the test found no CUDA device, so nothing was checked"
  failed=1
fi
rm -f "${log}"

peak=${GEOLOCO_TF32_PEAK_TFLOPS:-}
if [ -z "${peak}" ] && command -v nvidia-smi >/dev/null \
   && timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader | grep -Eq 'H100|H200'; then
  peak=494.7  # H100/H200 SXM, dense TF32 tensor cores
fi
step "gpt throughput benchmark" 90 "${build}/bin/geoloco-gpu-bench" --steps 10 --warmup 2 \
  ${peak:+--peak-tflops "${peak}"} || failed=1

finish
