#!/usr/bin/env bash
# Goodput under failures (docs/RELIABILITY.md): the share of a fault-free
# run's committed tokens that a run with a machine lost and rebooted every N
# seconds commits in the same wall time, for N = 10, 30 and 60 s; each a
# median of --repeat runs, against the targets (95% at 30 s, 70% at 10 s).
#
#   scripts/faults/goodput.sh [--wall 120] [--every 10,30,60] [--repeat 3] [--down 5] [--seed 1]
# Needs a build (GEOLOCO_BUILD, default build/). About (1 + number of N) x repeat x (wall + 15) seconds.
set -euo pipefail
cd "$(dirname "$0")"
export GEOLOCO_BUILD=${GEOLOCO_BUILD:-$(cd ../.. && pwd)/build}
exec python3 goodput.py "$@"
