#!/usr/bin/env bash
# The main job, on one machine: three sites (site-a, site-b, site-c) on
# loopback train one byte-level GPT over the King James Bible with DiLoCo
# (configs/jobs/demo.yaml), talking mutually authenticated TLS, and then a
# synchronous data-parallel baseline with the same compute; a summary
# compares the two.
#
#   scripts/demo.sh            everything: deps, build, certificates, run, summary
#   scripts/demo.sh --no-baseline   skip the data-parallel baseline
#
# Files: demo/ (certificates, site data, checkpoints, logs); removed and
# recreated on every run. Ports: 7410-7412 (sites), 9410-9412 (metrics).
# The daemons and trainers are stopped on exit and on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=1
for arg in "$@"; do
  case "$arg" in
    --no-baseline) baseline=0 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

sites=(site-a site-b site-c)
job=configs/jobs/demo.yaml
bin=build/bin

echo "== dependencies and build (build/)"
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target geolocod geoloco geoloco-train >/dev/null

for port in 7410 7411 7412 9410 9411 9412; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "demo.sh: port $port is in use (another demo still running?); stop it and run again" >&2
    exit 1
  fi
done

rm -rf demo
mkdir -p demo/run demo/logs demo/tls
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'echo; echo "demo.sh: interrupted, stopping the sites"; exit 130' INT TERM

echo "== certificates: a federation CA and one certificate per site (demo/tls/)"
$bin/geoloco certs init --out demo/tls/ca >/dev/null
for s in "${sites[@]}"; do
  $bin/geoloco certs issue --ca demo/tls/ca --site "$s" --out "demo/tls/$s" >/dev/null
done

echo "== starting ${sites[*]} (logs in demo/logs/)"
for s in "${sites[@]}"; do
  $bin/geolocod --config "configs/sites/$s.yaml" --trainer "$bin/geoloco-train" >"demo/logs/$s.log" 2>&1 &
  pids+=($!)
done
for s in "${sites[@]}"; do
  for _ in $(seq 100); do
    [ -S "demo/run/$s.sock" ] && break
    sleep 0.1
  done
  [ -S "demo/run/$s.sock" ] || { echo "demo.sh: $s did not start; see demo/logs/$s.log" >&2; tail -5 "demo/logs/$s.log" >&2; exit 1; }
done

echo "== submitting $job, then watching it (geoloco watch demo)"
$bin/geoloco submit "$job" --socket demo/run/site-a.sock
started=$(date +%s)
$bin/geoloco watch demo --socket demo/run/site-a.sock
diloco_seconds=$(( $(date +%s) - started ))

# watch ends with site-a; the others end a moment later.
for s in "${sites[@]}"; do
  for _ in $(seq 150); do
    $bin/geoloco status demo --json --socket "demo/run/$s.sock" >"demo/status-$s.json"
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["jobs"][-1]["state"] != "finished")' \
      "demo/status-$s.json" && break
    sleep 0.2
  done
done

echo "== every site's history checked (geoloco check-history)"
history_dirs=()
for s in "${sites[@]}"; do history_dirs+=("demo/data/$s/jobs/demo"); done
$bin/geoloco check-history "${history_dirs[@]}" | sed 's/^/  /' || true

baseline_out=demo/logs/data-parallel.log
if [ "$baseline" = 1 ]; then
  # Data parallelism trains with its own tuned learning rate (bench/study.sh's
  # "Learning rates" table for this model: 0.004 beats 0.002), the same
  # tokens and the same global batch as the three sites together.
  dp_lr=0.004
  read -r rounds steps batch warmup < <(python3 - "$job" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
num = lambda k: re.search(rf"{k}: *([0-9.e-]+)", t).group(1)
print(re.search(r"stop: *\{rounds: *(\d+)", t).group(1), num("steps"), num("batch"), num("warmup"))
PY
)
  total=$(( rounds * steps ))
  echo "== baseline: synchronous data parallel, 3 workers x $total steps of batch $batch (the same compute), lr $dp_lr"
  started=$(date +%s)
  $bin/geoloco-train --model gpt --layers 2 --width 128 --heads 4 --context 64 --workers 3 \
    --steps "$total" --batch "$batch" --lr "$dp_lr" --warmup "$warmup" --weight-decay 0.01 --seed 1 \
    --eval-limit 512 >"$baseline_out" 2>&1
  baseline_seconds=$(( $(date +%s) - started ))
  tail -2 "$baseline_out"
else
  baseline_seconds=0
fi

echo
echo "== summary"
python3 - "$baseline" "$baseline_out" "$diloco_seconds" "$baseline_seconds" <<'PY'
import json, re, sys
baseline, log, diloco_s, baseline_s = sys.argv[1] == "1", sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sites = ["site-a", "site-b", "site-c"]
st = {s: json.load(open(f"demo/status-{s}.json"))["jobs"][-1] for s in sites}
a = st["site-a"]
params = None
rounds = a["round"]
print(f"DiLoCo, 3 sites, {rounds} rounds of H inner steps ({diloco_s} s):")
print(f"  final eval loss      {a['eval_loss']:.4f} nats/byte (held-out text, the final anchor)")
for s in sites:
    print(f"  {s} sent          {st[s]['bytes_sent']:>12,} bytes   anchor {st[s]['anchor_digest']}")
if len({st[s]['anchor_digest'] for s in sites}) != 1 or any(st[s]["round"] != rounds for s in sites):
    # Every site applies the same committed rounds bit for bit: different
    # anchors at the end are a bug, and the demo says so with its exit code.
    print("  ERROR: the sites did not end on one anchor of one round:",
          ", ".join(f"{s} round {st[s]['round']} {st[s]['anchor_digest']}" for s in sites))
    sys.exit(1)
print(f"  checkpoint           {a['checkpoint']}")
if baseline:
    text = open(log).read()
    ev = re.findall(r"eval loss ([0-9.]+) nats/byte", text)
    m = re.search(r"(\d+) parameters", text)
    steps = re.search(r"done: (\d+) steps", text)
    print(f"Synchronous data parallel, same compute ({baseline_s} s):")
    print(f"  final eval loss      {float(ev[-1]):.4f} nats/byte" if ev else "  final eval loss      (not found in the log)")
    if m and steps:
        params, n = int(m.group(1)), 3
        per_site = 2 * (n - 1) / n * 4 * params * int(steps.group(1))
        print(f"  each site would send {per_site:>12,.0f} bytes across the WAN: one fp32 gradient all-reduce per step,")
        print(f"                       2(N-1)/N x 4 B x {params:,} parameters x {steps.group(1)} steps (the bound; computed)")
        fewer = per_site / max(st['site-a']['bytes_sent'], 1)
        print(f"  DiLoCo sent {fewer:,.0f}x fewer bytes per site")
        if ev:
            gap = (a['eval_loss'] / float(ev[-1]) - 1) * 100
            verdict = "within" if gap <= 2 and fewer >= 100 else "outside"
            print(f"Verdict: DiLoCo's eval loss is {gap:+.1f}% against data parallelism's for {fewer:,.0f}x fewer "
                  f"bytes, {verdict} the goal of 2% for 100x fewer bytes")
PY
echo
echo "Logs: demo/logs/, trainer logs and checkpoints: demo/data/<site>/jobs/demo/"
