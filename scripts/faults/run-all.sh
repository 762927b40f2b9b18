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

# The scenarios and their arguments, one per line: the same lists ctest reads.
read_list() { grep -v -e '^#' -e '^[[:space:]]*$' "$1"; }
mapfile -t quick < <(read_list quick.list)
mapfile -t full < <(read_list long.list)
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
