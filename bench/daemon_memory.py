"""docs/design.md §10's daemon memory budget, measured: two geolocod sites run an
external-trainer job on a model of P parameters (16 Mi by default) whose
trainers (the Python client, no compute) just perturb the replica each
round; a sampler reads each daemon's private memory (RssAnon: its own
copies, not the shared segment it shares with the trainer) every 20 ms.

Prints, per site, the private memory before the job, after it (between
rounds: anchor, momentum, residual) and at its peak (during a round), in
bytes per parameter next to the bounds: 12 between rounds (docs/design.md §10);
during a round 12 plus the averaged Δ, which the daemon holds as the
all-gather's encoded chunks until the round commits: 1 B/param with q8, 4
raw. (The all-reduce makes the site's own Δ_s one chunk at a time; the
residual needs no backup.)
(The STATE_SYNC rate of a joining site: bench/state_sync.py.)

    /usr/bin/python3 bench/daemon_memory.py [--params N] [--rounds R] [--build DIR] [--json]

GEOLOCO_BENCH_SMAPS=1 also lists each daemon's anonymous mappings over
16 MiB after the job (to find what holds memory).
"""

import argparse
import json
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/e2e"))
sys.path.insert(0, os.path.join(HERE, "../python"))
from federation import Federation  # noqa: E402
from geoloco import sync_client  # noqa: E402
import numpy as np  # noqa: E402


def rss_anon(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def trainer(sock, job, layout, rounds, initial, errors, first_result):
    try:
        c = sync_client.SyncClient.connect(sock, job, layout, connect_timeout=60, welcome_timeout=600)
        if not c.anchor_ready:
            c.params[:] = initial
            c.send_initial(timeout=600)
        rng = np.random.default_rng(len(sock))
        noise = (rng.standard_normal(c.params.size, dtype=np.float32) * 1e-3).astype(np.float32)
        while not c.stopped:
            c.params -= noise
            c.sync(c.next_round(0), 0, 1000, 1.0)
            c.wait_result(timeout=600)
            first_result.set()
            time.sleep(1.0)  # an inner phase: the daemon sits between rounds
        c.close()
    except Exception as e:  # reported by the main thread
        errors.append(f"{sock}: {e!r}")


def matrix_layout(params):
    """One (params / 1024) x 1024 fp32 tensor, and its parameter count
    (params rounded down to a multiple of 1024)."""
    rows = params // 1024
    return sync_client.layout_of([("w", (rows, 1024))]), rows * 1024


def run_external_job(fed, job, layout, rounds, initial, first_result):
    """Runs `trainer` for every site of `fed` on job `job` and waits until
    the job has finished on all of them."""
    errors, threads = [], []
    for s in fed.sites:
        sock = os.path.join(s.dir, "data", "jobs", job, "sync.sock")
        t = threading.Thread(target=trainer, args=(sock, job, layout, rounds, initial, errors, first_result))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=1200)
    assert not errors, errors
    fed.wait_for(lambda: all((s.status(job) or {}).get("state") == "finished" for s in fed.sites), 600,
                 "the job to finish")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=16 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(HERE, "../build"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--raw", action="store_true", help="raw fp32 exchange (no compression, no error feedback)")
    args = ap.parse_args()
    layout, P = matrix_layout(args.params)

    with Federation(names=("site-a", "site-b"), build=args.build, heartbeat_timeout="30s",
                    read_timeout="20s") as fed:
        fed.start()
        pids = {s.name: s.process.pid for s in fed.sites}
        before = {n: rss_anon(p) for n, p in pids.items()}
        peak = dict(before)
        floor = {n: None for n in pids}  # lowest after the first round: the daemon between rounds
        stop = threading.Event()
        first_result = threading.Event()

        def sample():
            while not stop.is_set():
                for n, p in pids.items():
                    try:
                        v = rss_anon(p)
                    except OSError:
                        continue
                    peak[n] = max(peak[n], v)
                    if first_result.is_set():
                        floor[n] = v if floor[n] is None else min(floor[n], v)
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        job = fed.write_job(f"""name: memory
sites: [site-a, site-b]
coordinator: site-a
trainer: {{kind: external}}
inner: {{steps: 1}}
{"" if args.raw else "compression: [{quantize: {bits: 8}}, zstd]"}
straggler: {{deadline: 60s, min_sites: 2}}
checkpoint: {{every_rounds: 1000}}
stop: {{rounds: {args.rounds}}}
""")
        fed["site-a"].cli("submit", job)
        run_external_job(fed, "memory", layout, args.rounds, np.linspace(-1, 1, P, dtype=np.float32), first_result)
        after = {n: rss_anon(p) for n, p in pids.items()}
        if os.environ.get("GEOLOCO_BENCH_SMAPS"):
            for n, p in pids.items():
                cur = None
                for line in open(f"/proc/{p}/smaps"):
                    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                        cur = line.strip()
                    elif line.startswith("Anonymous:"):
                        kb = int(line.split()[1])
                        if kb > 16 * 1024:
                            print(n, kb // 1024, "MiB", cur, file=sys.stderr)
        stop.set()
        sampler.join()
        log_b = open(fed["site-b"].log_path).read()
        assert len({s.status("memory")["anchor_digest"] for s in fed.sites}) == 1

    result = {"params": P, "rounds": args.rounds, "sites": {},
              "in_round_bound_bytes_per_param": 16 if args.raw else 13}
    for n in pids:
        result["sites"][n] = {
            "between_rounds_bytes_per_param": (floor[n] - before[n]) / P,
            "after_job_bytes_per_param": (after[n] - before[n]) / P,
            "peak_bytes_per_param": (peak[n] - before[n]) / P,
        }
    if args.json:
        print(json.dumps(result))
        return
    print(f"daemon private memory (RssAnon) for a job of {P:,} parameters, {'raw fp32' if args.raw else 'q8+zstd'}, {args.rounds} rounds:")
    print(f"{'site':8} {'between rounds':>16} {'bound':>6} {'ratio':>6} {'peak (in a round)':>18} {'bound':>6} "
          f"{'ratio':>6} {'after the job':>14}")
    in_round = result["in_round_bound_bytes_per_param"]
    for n, r in result["sites"].items():
        b, pk, af = r["between_rounds_bytes_per_param"], r["peak_bytes_per_param"], r["after_job_bytes_per_param"]
        print(f"{n:8} {b:13.2f} B/p {12:6} {b / 12:6.2f} {pk:15.2f} B/p {in_round:6} {pk / in_round:6.2f} {af:10.2f} B/p")
    print(f"bounds: 12 B/param between rounds (anchor, momentum, residual: docs/design.md §10); {in_round} during a round "
          f"(+ the averaged Δ as its encoded chunks, {in_round - 12} B/param {'raw' if args.raw else 'with q8'}; "
          "Δ_s is made one chunk at a time, the residual needs no backup)")


if __name__ == "__main__":
    main()
