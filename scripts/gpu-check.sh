#!/usr/bin/env bash
# gpu-check.sh: the ONE check to run on a machine with a GPU.
#
#   1. configures and builds the CUDA backend (build-gpu/, Release), only the
#      three targets it needs;
#   2. runs the CUDA backend test: every op, the mlp and gpt runners, a
#      one-rank NCCL group, and the device trainer (geoloco-train --backend
#      cuda) against the CPU reference (inner/cuda/tests/);
#   3. runs geoloco-gpu-bench: gpt training throughput (tokens/s) and MFU,
#      fp32 and TF32, next to a cuBLAS gemm timed in the same run;
#   4. runs geoloco-train --model gpt for the same fixed number of steps with
#      --backend cuda and --backend cpu and prints both tokens/s side by side,
#      with both final eval losses (same seed and data: they must agree to
#      rounding; more than 1% apart fails the check);
#   5. with the time left, the cross-site all-reduce without a rate cap on
#      this many-core host (the 1 GB/s of TLS payload per site target cannot be
#      measured on the 2-core CI machine): builds `geoloco` and runs
#      `geoloco bench allreduce --sites 2 --size 268435456`, then the same
#      with `--io-threads 1` (one core per site's connections, to compare).
#      Running out of time here skips the step; a failing benchmark fails
#      the check.
#
# Every figure goes to stdout. Each step runs under `timeout`, capped by what
# is left of a 465 s budget for the whole script, so it ends in under 8
# minutes on any host; on an H200 host with 16 cores it takes about 3 to 4, most
# of it the build. Exits non-zero if a step fails, times out, or the test
# finds no GPU (here a skip would mean the check checked nothing).
#
# Usage: scripts/gpu-check.sh            (from anywhere in the repository)
#        scripts/gpu-check.sh --emulator (no GPU needed: the same steps on the
#          CUDA emulator's builds of the test, the benchmark and geoloco-train
#          from an existing main build (build/, or GEOLOCO_GPU_BUILD_DIR), with
#          small sizes and without the all-reduce; ctest runs it, so a broken
#          step shows in CI before a GPU is lent. Its figures mean nothing.)
#        scripts/gpu-check.sh --round-bench (a second command, for a session
#          with device time left: `geoloco bench step` (the passes that end a
#          round on 1 to 16 threads), then bench/scale.py at 1 Gi parameters, 2 sites,
#          q8 and raw, uncapped, on the host's cores; about 6 to 8 minutes,
#          up to about 55 GB of the host's disk (each site's checkpoint of 12 GB
#          and the one being written) and 50 GB of memory;
#          GEOLOCO_ROUND_BENCH_PARAMS=N for another size)
#   GEOLOCO_TF32_PEAK_TFLOPS=...  the datasheet TF32 peak for the TF32 MFU
#                                 line (default: 494.7 on an H100/H200, dense)
set -uo pipefail

cd "$(dirname "$0")/.."
emulator=0
round_bench=0
case "${1:-}" in
  "") ;;
  --emulator) emulator=1 ;;
  --round-bench) round_bench=1 ;;
  *) echo "gpu-check.sh: unknown argument '$1' (usage: scripts/gpu-check.sh [--emulator | --round-bench])" >&2
     exit 2 ;;
esac
if [ "${emulator}" -eq 1 ]; then
  build=${GEOLOCO_GPU_BUILD_DIR:-build}
  test_bin=${build}/tests/inner_cuda_emulated_test
  bench_bin=${build}/tests/geoloco-gpu-bench-emulated
  train_bin=${build}/tests/geoloco-train-emulated
  bench_size=(--layers 1 --width 32 --heads 2 --context 16 --batch 2 --gemm-size 256)
  train_size=(--layers 1 --width 32 --heads 2 --context 32 --batch 8)
  train_steps=20
else
  build=${GEOLOCO_GPU_BUILD_DIR:-build-gpu}  # overridable, to smoke-test the script against an existing build
  test_bin=${build}/tests/inner_cuda_backend_test
  bench_bin=${build}/bin/geoloco-gpu-bench
  train_bin=${build}/bin/geoloco-train
  bench_size=()
  train_size=()
  train_steps=50
fi
jobs=$(nproc)
start=$(date +%s)
budget=465  # seconds for everything; 8 minutes less the kill grace and a margin
failed=0

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local left=$(( budget - ($(date +%s) - start) ))
  if [ "${left}" -lt "${limit}" ]; then
    limit=${left}
  fi
  if [ "${limit}" -le 0 ]; then
    echo "=== gpu-check: ${name}: no time left of the ${budget}s budget"
    return 124
  fi
  echo "=== gpu-check: ${name} (limit ${limit}s)"
  local t0=$(date +%s)
  timeout --kill-after=5 "${limit}" "$@"
  local rc=$?
  echo "=== gpu-check: ${name}: exit ${rc} after $(( $(date +%s) - t0 ))s"
  [ "${rc}" -eq 124 ] && echo "=== gpu-check: ${name} TIMED OUT"
  return "${rc}"
}

finish() {
  echo "=== gpu-check: total $(( $(date +%s) - start ))s, $([ "${failed}" -eq 0 ] && echo PASSED || echo FAILED)"
  exit "${failed}"
}

if [ "${round_bench}" -eq 1 ]; then
  # The daemon's round at 1 Gi parameters on this many-core host (bench/scale.py:
  # 2 sites, q8 + zstd with error feedback and raw fp32, uncapped): the CPU per GB
  # by stage, memory, checkpoints and the state sync where users run. No GPU used.
  budget=540
  params=${GEOLOCO_ROUND_BENCH_PARAMS:-1073741824}
  step configure 60 cmake -S . -B "${build}" -DCMAKE_BUILD_TYPE=Release || { failed=1; finish; }
  step "build geolocod, geoloco, geoloco-train" 240 cmake --build "${build}" -j"${jobs}" \
    --target geolocod geoloco geoloco-train || { failed=1; finish; }
  # The passes that end a round on 1 to 16 threads of this host (1 GiB values, 4 GB of fp32).
  step "passes over ${params} values, 1 to 16 threads" 90 "${build}/bin/geoloco" bench step \
    --values "${params}" --threads 1,2,4,8,16 --repeats 2 || failed=1
  step "round bench, ${params} parameters, 2 sites, uncapped" 420 /usr/bin/python3 bench/scale.py \
    --params "${params}" --sites 2 --runs q8,raw --rounds 3 --build "${build}" || failed=1
  finish
fi

if [ "${emulator}" -eq 1 ]; then
  echo "=== gpu-check: on the CUDA emulator (no GPU): checks the steps, not the GPU; the figures mean nothing"
  for bin in "${test_bin}" "${bench_bin}" "${train_bin}"; do
    [ -x "${bin}" ] || { echo "=== gpu-check: ${bin} is not built (build the main build first)"; failed=1; finish; }
  done
else
  if command -v nvidia-smi >/dev/null; then
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  else
    echo "=== gpu-check: nvidia-smi not found; relying on the CUDA runtime to find the GPU"
  fi
  step configure 60 cmake -S . -B "${build}" -DGEOLOCO_CUDA=ON -DCMAKE_BUILD_TYPE=Release || { failed=1; finish; }
  step build 240 cmake --build "${build}" -j"${jobs}" --target inner_cuda_backend_test geoloco-gpu-bench geoloco-train \
    || { failed=1; finish; }
fi

log=$(mktemp)
step "CUDA backend test (vs the CPU reference)" 60 "${test_bin}" --durations yes 2>&1 \
  | tee "${log}"
test_rc=${PIPESTATUS[0]}
if [ "${test_rc}" -ne 0 ]; then
  failed=1
elif grep -q "SKIPPED: no CUDA device" "${log}"; then
  echo "=== gpu-check: the test found no CUDA device, so nothing was checked"
  failed=1
fi

peak=${GEOLOCO_TF32_PEAK_TFLOPS:-}
if [ -z "${peak}" ] && command -v nvidia-smi >/dev/null \
   && timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader | grep -E 'H100|H200' >/dev/null; then
  peak=494.7  # H100/H200 SXM, dense TF32 tensor cores
fi
step "gpt throughput benchmark" 90 "${bench_bin}" --steps 10 --warmup 2 "${bench_size[@]}" \
  ${peak:+--peak-tflops "${peak}"} || failed=1

# geoloco-train itself, both backends, the same run: the default gpt (4
# blocks, width 128, context 64, batch 16) for a fixed number of steps, one
# worker. The KJV text when `bible` is installed, else this repository's
# inner/ sources as text (throughput does not depend on the bytes).
text_args=()
if ! command -v bible >/dev/null; then
  text=$(mktemp)
  cat inner/*/*.cpp inner/*/*.h inner/*/*/*.cpp > "${text}"
  text_args=(--text "${text}")
  echo "=== gpu-check: bible-kjv not installed; geoloco-train reads ${text} ($(wc -c < "${text}") bytes) instead"
fi
declare -A tokens loss
for backend in cuda cpu; do
  limit=$([ "${backend}" = cuda ] && echo 45 || echo 90)
  step "geoloco-train --backend ${backend} --model gpt, ${train_steps} steps" "${limit}" \
    "${train_bin}" --backend "${backend}" --model gpt --steps "${train_steps}" --eval-limit 64 \
    "${train_size[@]}" "${text_args[@]}" 2>&1 | tee "${log}"
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    failed=1
    continue
  fi
  # "done: 50 steps, 1.2 s, 42000 tokens/s, params digest …" and the last "eval loss X".
  tokens[${backend}]=$(sed -n 's/^done: .*, \([0-9]*\) tokens\/s,.*/\1/p' "${log}")
  loss[${backend}]=$(sed -n 's/.*eval loss \([0-9.]*\).*/\1/p' "${log}" | tail -n 1)
done
[ -n "${text_args[*]}" ] && rm -f "${text_args[1]}"
rm -f "${log}"
if [ -n "${tokens[cuda]:-}" ] && [ -n "${tokens[cpu]:-}" ]; then
  echo "=== gpu-check: geoloco-train gpt, ${train_steps} steps: --backend cuda ${tokens[cuda]} tokens/s," \
       "--backend cpu ${tokens[cpu]} tokens/s ($(awk -v a="${tokens[cuda]}" -v b="${tokens[cpu]}" \
       'BEGIN { printf "%.1fx", (b > 0 ? a / b : 0) }')); eval loss cuda ${loss[cuda]}, cpu ${loss[cpu]}"
  if ! awk -v a="${loss[cuda]}" -v b="${loss[cpu]}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.01 * b) }'; then
    echo "=== gpu-check: the two backends' eval losses are more than 1% apart"
    failed=1
  fi
else
  echo "=== gpu-check: geoloco-train did not report tokens/s for both backends"
  failed=1
fi

# The uncapped all-reduce on a host with more cores than sites; informational, skipped when
# the budget is spent (exit 124), failed when the benchmark itself fails.
[ "${emulator}" -eq 1 ] && finish  # nothing GPU-related left, and CI measures it elsewhere
step "build geoloco (for the all-reduce benchmark)" 120 cmake --build "${build}" -j"${jobs}" --target geoloco
rc=$?
if [ "${rc}" -eq 0 ]; then
  step "all-reduce, 2 sites, 256 MiB, no rate cap" 60 "${build}/bin/geoloco" bench allreduce --sites 2 \
    --size 268435456
  rc=$?
fi
if [ "${rc}" -eq 0 ]; then
  # The same with one I/O thread per site: what running connections on several cores buys.
  step "all-reduce as above, 1 I/O thread per site" 40 "${build}/bin/geoloco" bench allreduce --sites 2 \
    --size 268435456 --io-threads 1 --no-baseline
  rc=$?
fi
if [ "${rc}" -eq 124 ]; then
  echo "=== gpu-check: the all-reduce benchmark did not fit in the budget (not a failure)"
elif [ "${rc}" -ne 0 ]; then
  failed=1
fi

finish
