#!/usr/bin/env bash
# Runs the fault scenarios against real daemons on this machine, one after
# another, each ending with the history checker and a one-line verdict, and
# sums them up. Needs a build (scripts/test.sh makes one; GEOLOCO_BUILD names
# another build folder).
#
#   scripts/faults/run-all.sh           the quick set (also ctest -L faults)
#   scripts/faults/run-all.sh --long    also the full matrix: more and longer
#                                       faults, larger models, and the churn soak
set -uo pipefail
cd "$(dirname "$0")"

long=0
for arg in "$@"; do
  case "$arg" in
    --long) long=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run-all.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
export GEOLOCO_BUILD=${GEOLOCO_BUILD:-$(cd ../.. && pwd)/build}
if [ ! -x "$GEOLOCO_BUILD/bin/geolocod" ] || [ ! -x "$GEOLOCO_BUILD/bin/geoloco-faultproxy" ]; then
  echo "run-all.sh: no build at $GEOLOCO_BUILD (run scripts/test.sh, or set GEOLOCO_BUILD)" >&2
  exit 2
fi

# Each line: a scenario and its arguments. The quick set is what ctest runs.
quick=(
  "partition_heal.py"
  "partition_minority.py"
  "slow_link.py"
  "flapping_link.py"
  "blackhole_link.py"
  "kill_site.py"
  "kill_coordinator.py"
  "coordinator_failover.py"
  "sigstop_site.py"
  "trainer_faults.py"
  "disk_faults.py"
  "full_disk.py"
  "hostile_peers.py"
  "cert_rotation.py"
  "donor_death.py"
  "federation_crash.py"
  "slow_rejoin.py"
  "durable_order.py"
)
full=(
  "partition_heal.py --repeat 5 --partition-seconds 21 --resume-bound 60"
  "partition_heal.py --repeat 3 --partition-seconds 21 --resume-bound 60 --width 256"
  "partition_heal.py --repeat 5 --partition-seconds 21 --resume-bound 60 --reset-mid 1"
  "partition_minority.py --repeat 3 --rounds 70"
  "flapping_link.py --rounds 30 --period 2s --down 500ms"
  "blackhole_link.py --blackhole-seconds 20 --rounds 40"
  "kill_site.py --repeat 4 --rounds 100 --seed 2"
  "kill_coordinator.py --repeat 3 --rounds 80 --seed 2"
  "coordinator_failover.py --rounds 60 --partition-seconds 20"
  "federation_crash.py --rounds 90 --phases inner,allreduce,commit,commit-elect,commit-lost-entry,after-commit,inner,allreduce,commit,commit-elect,commit-lost-entry,after-commit,sigterm --seed 2"
  "sigstop_site.py --repeat 5 --rounds 160 --stop-seconds 12"
  "churn_soak.py --duration 600 --seed 3"
  "slow_rejoin.py --width 4096 --steps 40 --rounds 30"
  "slow_rejoin.py --width 81920 --steps 2 --rounds 48 --rate 400M --bound-factor 0"
)
set=("${quick[@]}")
[ "$long" = 1 ] && set+=("${full[@]}")

logs=$(mktemp -d /tmp/geoloco-faults-XXXXXX)
passed=0 failed=0 skipped=0 start=$SECONDS
for entry in "${set[@]}"; do
  read -r -a cmd <<<"$entry"
  log="$logs/$(echo "$entry" | tr ' /' '__').log"
  t0=$SECONDS
  timeout 900 python3 "${cmd[@]}" >"$log" 2>&1
  rc=$?
  line=$(grep '^VERDICT ' "$log" | tail -1)
  [ -n "$line" ] || line="VERDICT ${cmd[0]}: FAIL exit $rc without a verdict (log: $log)"
  if [ $rc -eq 77 ]; then skipped=$((skipped + 1))
  elif [ $rc -ne 0 ]; then failed=$((failed + 1))
  else passed=$((passed + 1)); fi
  echo "$line ($((SECONDS - t0)) s)"
done
echo "== fault scenarios: $passed passed, $skipped skipped, $failed failed, $((SECONDS - start)) s; logs in $logs"
[ $failed -eq 0 ]
