#!/usr/bin/env bash
# `geoloco-train --backend cuda --workers 2` end to end on 2 emulated
# devices: geoloco-train starts the two worker processes, they meet in an
# NCCL group (rank 0 publishes the unique id), and each trains on one
# device. The run must end with the same parameter digest, bit for bit, as
# one worker with 2 micro-batches on the same samples, for mlp and gpt; and
# the banner must name the NCCL collective and 2 devices.
#
# Usage: train_cuda_workers_emulated.sh BUILD_DIR   (ctest runs it)
set -uo pipefail
train=$1/tests/geoloco-train-emulated
text=$(mktemp)
trap 'rm -f "${text}"' EXIT
# Any text serves; the repository's own sources keep the test off the bible package.
cat "$(dirname "$0")"/../*.cpp "$(dirname "$0")"/../*.h > "${text}"
fail=0
for model in mlp gpt; do
  if [ "${model}" = mlp ]; then
    args=(--model mlp --hidden 32 --steps 8 --batch 16 --eval-limit 500)
    [ -d /usr/share/datasets/fashion-mnist ] || { echo "mlp: SKIPPED (no dataset-fashion-mnist)"; continue; }
  else
    args=(--model gpt --layers 1 --width 32 --heads 2 --context 32 --batch 4 --steps 6 --eval-limit 16 --text "${text}")
  fi
  two=$(GEOLOCO_CUDA_EMULATOR_DEVICES=2 "${train}" --backend cuda --workers 2 "${args[@]}" 2>&1)
  rc2=$?
  one=$("${train}" --backend cuda --micro-batches 2 "${args[@]}" 2>&1)
  rc1=$?
  printf '%s\n' "${two}" | grep -v '^geoloco CUDA emulator:' | sed "s/^/${model}, 2 workers: /"
  printf '%s\n' "${one}" | grep -v '^geoloco CUDA emulator:' | tail -n 1 | sed "s/^/${model}, 1 worker: /"
  digest2=$(printf '%s\n' "${two}" | sed -n 's/^done: .*params digest \([0-9a-f]*\).*/\1/p')
  digest1=$(printf '%s\n' "${one}" | sed -n 's/^done: .*params digest \([0-9a-f]*\).*/\1/p')
  if [ "${rc2}" -ne 0 ] || [ "${rc1}" -ne 0 ]; then
    echo "FAIL ${model}: exit ${rc2} (2 workers), ${rc1} (1 worker)"
    fail=1
  elif [ -z "${digest2}" ] || [ "${digest2}" != "${digest1}" ]; then
    echo "FAIL ${model}: parameter digests differ: '${digest2}' (2 workers) vs '${digest1}' (1 worker, 2 micro-batches)"
    fail=1
  elif ! grep -q '2 worker(s) \[nccl, launcher geoloco\], cuda backend, device 0 of 2' <<<"${two}"; then
    echo "FAIL ${model}: the banner does not name the NCCL group on 2 devices"
    fail=1
  fi
done
exit "${fail}"
