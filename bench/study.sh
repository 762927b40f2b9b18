#!/usr/bin/env bash
# The DiLoCo study (bench/study.py): DiLoCo against data parallelism and one
# site alone at equal compute, over sites, H, the outer optimizer, the data
# split, compression and Streaming DiLoCo, each with two seeds, on the
# built-in models. Writes its tables into bench/RESULTS.md (between the study
# markers) and its plots into bench/study/.
#
#   bench/study.sh             the default study (about 30 minutes on 2 cores)
#   bench/study.sh --full      longer runs, every table on both models (hours)
#   bench/study.sh --only gpt  one model; --seeds N; --no-write; --help
#   bench/study.sh --full --only gpt --headline --sites 4 --seeds 1 --no-write
#                              one longer check of the first table (about 35 min)
#
# Runs are cached in build/study-cache/ by job, arguments and binary: a
# second run redoes only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,16p' "$0"; exit 0 ;; esac
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target geoloco geoloco-train >/dev/null
exec /usr/bin/python3 bench/study.py "$@"
