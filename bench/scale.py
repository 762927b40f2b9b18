"""What a round costs geolocod at the sizes users train, measured.

N real geolocod daemons on loopback run an external-trainer job of P
parameters (default 256 Mi, 3 sites). Each site's trainer is synthetic (the
Python client, no training): before each round its replica moves by a
seeded random walk (uniform steps of at most 1e-3 per value, different
bytes every round, so the codecs see data that does not repeat), so only
the daemon is measured. Runs, each a fresh federation:

  q8-link   q8 + zstd with error feedback, every pair of sites through
            geoloco-faultproxy at --rate each way and --rtt
  q8        the same, uncapped (direct loopback connections)
  raw-link  raw fp32 (no compression, no residual), through the proxy
  raw       raw fp32, uncapped

Each trainer's inner phase lasts --phase-seconds (8 by default: the walk,
then idle, standing for a GPU's steps), so a checkpoint written in the
background after a round has the phase to finish in. Per round it prints:
  - the round's wall time (the slowest site's PLAN to its step applied: the
    record's exchange_seconds) next to its bounds: the link bound (the
    busiest link's bytes at --rate, measured from the bytes each site sent,
    plus 3 RTTs: the round trips a round waits for, common/wan_model.h) and
    the CPU bound (every daemon's CPU seconds in the round, plus the proxy's
    share, over the machine's cores: here every site shares the same cores);
  - the daemon's CPU by stage (round_costs.h: encode, transfer,
    decode_average, clip, digest, round_log, feedback, outer_step, history,
    checkpoint), summed over the sites, and per GB of fp32 model per site;
  - the passes over the averaged Δ (decodes per chunk) and over the site's
    own contribution (encodes per chunk), as the daemon counted them;
  - the longest a daemon's event loop was held at once in the round (its
    heartbeats waited as long; the passes over the model run off it);
  - each daemon's private memory (RssAnon, sampled every 50 ms), its peak in
    the round and its lowest between rounds, in bytes per parameter, next
    to the bounds (12 between rounds: anchor, momentum, residual; 13 during
    a round with q8);
  - the checkpoint after the round, if any: its seconds and bytes next to
    the disk's sequential write speed, measured in the same run (a file of
    the checkpoint's size written and fsync'd in the same folder).
After the rounds: each joining site's STATE_SYNC at the job's start (the
coordinator's state to every other site) next to its link bound, and the
start-up time of a site's daemon from its checkpoint (SIGTERM after the job,
started again, until its status shows the anchor).

    /usr/bin/python3 bench/scale.py [--params N] [--sites N] [--rounds R] [--runs q8-link,q8,raw-link,raw]
                                    [--rate 1G] [--rtt 100] [--phase-seconds 8] [--step-threads N]
                                    [--build DIR] [--json]

--json prints one object per round (and one per run for the state sync
and the start-up), with at least params, sites, wall_s, link_bound_s,
cpu_bound_s, decodes_per_chunk, encodes_per_chunk and
peak_rss_bytes_per_param.
"""

import argparse
import json
import mmap
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/e2e"))
sys.path.insert(0, os.path.join(HERE, "../python"))
sys.path.insert(0, HERE)
from federation import Federation, link_name  # noqa: E402
from geoloco import sync_client  # noqa: E402
from daemon_memory import matrix_layout, rss_anon  # noqa: E402
from state_sync import rate_mbit  # noqa: E402
import numpy as np  # noqa: E402

JOB = "scale"
NAMES = ("site-a", "site-b", "site-c", "site-d", "site-e", "site-f", "site-g", "site-h")
STAGES = ("encode", "transfer", "decode_average", "clip", "digest", "round_log", "feedback", "outer_step", "history",
          "checkpoint")
WALK_BLOCK = 1 << 22
# A joining site's log line once its state is in place (from one holder or several).
RECEIVED = re.compile(r"state of round (\d+) received from (.+?): (\d+) parameters, (\d+) bytes in ([0-9.]+) s")  # values per numpy call of the random walk


def walk(params, seed, site, round_):
    """Moves every value by a uniform step in [-1e-3, 1e-3), seeded by (seed, site, round)."""
    rng = np.random.default_rng([seed, site, round_])
    for at in range(0, params.size, WALK_BLOCK):
        part = params[at:at + WALK_BLOCK]
        step = rng.random(part.size, dtype=np.float32)
        step -= 0.5
        step *= 2e-3
        part += step


def trainer(sock, layout, seed, site, errors, stop, restarts, hold, phase_seconds):
    """One site's synthetic trainer; it connects again after its daemon restarts (restarts: an Event set
    meanwhile). It syncs round hold[0] only once the Event hold[1] is set."""
    while not stop.is_set():
        try:
            c = sync_client.SyncClient.connect(sock, JOB, layout, connect_timeout=120, welcome_timeout=1800)
            if not c.anchor_ready:
                rng = np.random.default_rng([seed, 1 << 20])
                for at in range(0, c.params.size, WALK_BLOCK):
                    n = min(WALK_BLOCK, c.params.size - at)
                    c.params[at:at + n] = rng.random(n, dtype=np.float32) - 0.5
                c.send_initial(timeout=1800)
            while not c.stopped and not stop.is_set():
                r = c.next_round(0)
                started = time.monotonic()
                walk(c.params, seed, site, r)
                # The rest of an inner phase (a GPU's steps), idle here.
                time.sleep(max(0.0, phase_seconds - (time.monotonic() - started)))
                if r == hold[0]:
                    hold[1].wait()
                c.sync(r, 0, 1000, 1.0)
                c.wait_result(timeout=1800)
            c.close()
            return
        except Exception as e:
            if not restarts.is_set():
                errors.append(f"site {site}: {e!r}")
                return
            time.sleep(0.5)


def proc_cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def disk_write_speed(folder, nbytes):
    """Bytes per second of writing `nbytes` to a new file in `folder` and fsync'ing it, past the page
    cache (O_DIRECT, as geolocod writes a checkpoint) where the filesystem allows: the device's own
    sequential speed, which a buffered write's varies around with the page cache's state."""
    path = os.path.join(folder, "disk-speed.bin")
    block = mmap.mmap(-1, 16 << 20)  # page-aligned, as O_DIRECT needs
    block.write(os.urandom(1 << 20) * 16)  # 16 MiB that zstd or a filesystem cannot shrink
    nbytes -= nbytes % len(block)
    start = time.monotonic()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    except OSError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.monotonic() - start
    os.unlink(path)
    return nbytes / seconds


class Sampler:
    """Each daemon's RssAnon every 50 ms: the peak since the last take(), and the lowest while no round runs."""

    def __init__(self, pids):
        self.pids = pids
        self.lock = threading.Lock()
        self.peak = {n: 0 for n in pids}
        self.low = {n: None for n in pids}
        self.between = threading.Event()  # set while no round is in flight (the trainers walk)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            for n, p in self.pids.items():
                try:
                    v = rss_anon(p)
                except OSError:
                    continue
                with self.lock:
                    self.peak[n] = max(self.peak[n], v)
                    if self.between.is_set():
                        self.low[n] = v if self.low[n] is None else min(self.low[n], v)
            time.sleep(0.05)

    def take(self):
        with self.lock:
            peak, low = dict(self.peak), dict(self.low)
            self.peak = {n: 0 for n in self.pids}
            self.low = {n: None for n in self.pids}
        return peak, low

    def close(self):
        self.stop.set()
        self.thread.join()


def job_text(sites, rounds, raw, every):
    return f"""name: {JOB}
sites: [{", ".join(sites)}]
coordinator: {sites[0]}
trainer: {{kind: external}}
inner: {{steps: 1}}
{"" if raw else "compression: [{quantize: {bits: 8}}, zstd]"}
straggler: {{deadline: 1800s, min_sites: {len(sites)}}}
checkpoint: {{every_rounds: {every}}}
stop: {{rounds: {rounds}}}
"""


def run(args, name, P, layout):
    raw = name.startswith("raw")
    capped = name.endswith("-link")
    sites = NAMES[:args.sites]
    cores = os.cpu_count() or 1
    gb = 4 * P / 1e9  # the fp32 model at a site
    rows = []
    # Each site its share of the cores for its passes over the model: the
    # sites share this machine's cores, where a real site has a host of its own.
    step_threads = args.step_threads if args.step_threads is not None else max(1, cores // len(sites))
    extra = f"step_threads: {step_threads}\n"
    with Federation(names=sites, build=args.build, heartbeat_timeout="180s", read_timeout="120s", proxy=capped,
                    keep=args.keep, site_extra=extra) as fed:
        fed.start()
        if capped:
            for i, a in enumerate(sites):
                for b in sites[i + 1:]:
                    fed.proxy.set(link_name(a, b), both={"latency": f"{args.rtt / 2:g}ms", "rate": f"{args.rate:g}M"})
        disk = disk_write_speed(fed.root, 12 * P)
        pids = {s.name: s.process.pid for s in fed.sites}
        base = {n: rss_anon(p) for n, p in pids.items()}
        sampler = Sampler(pids)
        proxy_cpu = proc_cpu_seconds(fed.proxy.process.pid) if capped else 0.0
        errors, threads, stop, restarts = [], [], threading.Event(), threading.Event()
        # The trainers hold the round after the first checkpoint until a site
        # has been restarted from that checkpoint (the start-up figure).
        restart_after = args.checkpoint_every if args.checkpoint_every < args.rounds else 0
        hold = (restart_after + 1, threading.Event())
        if not restart_after:
            hold[1].set()
        fed[sites[0]].cli("submit", fed.write_job(job_text(sites, args.rounds, raw, args.checkpoint_every)))
        for i, s in enumerate(fed.sites):
            sock = os.path.join(s.dir, "data", "jobs", JOB, "sync.sock")
            t = threading.Thread(target=trainer, args=(sock, layout, args.seed, i, errors, stop, restarts, hold,
                                                      args.phase_seconds),
                                 daemon=True)
            t.start()
            threads.append(t)
        coordinator = fed[sites[0]]
        second = fed.sites[1]
        second_name = second.name
        seen, startup, before_restart = 0, None, {}
        deadline = time.monotonic() + args.timeout
        while seen < args.rounds:
            if errors:
                fed.fail(f"a trainer failed: {errors}")
            if time.monotonic() > deadline:
                fed.fail(f"{name}: round {seen + 1} of {args.rounds} did not commit within {args.timeout} s")
            st = coordinator.status(JOB) or {}
            r = st.get("round", 0)
            if r > seen:
                # The round has committed at the coordinator: until the next PLAN
                # the daemons sit between rounds (the trainers walk).
                sampler.between.set()
                time.sleep(0.3)
                peak, low = sampler.take()
                sampler.between.clear()
                proxy_now = proc_cpu_seconds(fed.proxy.process.pid) if capped else 0.0
                rows.append({"round": r, "peak": peak, "low": low, "proxy_cpu": proxy_now - proxy_cpu})
                proxy_cpu = proxy_now
                seen = r
                if startup is not None:
                    restarts.clear()  # the restarted site's trainer is back: a failure now is one
                if startup is None and restart_after and r == restart_after:
                    fed.wait_for(lambda: all((s.status(JOB) or {}).get("round", 0) >= r for s in fed.sites), 600,
                                 f"every site to apply round {r}")
                    startup, before_restart = restart(fed, second, sampler, pids, restarts, st.get("anchor_digest"))
                    hold[1].set()
                    deadline = time.monotonic() + args.timeout
            time.sleep(0.2)
        fed.wait_for(lambda: all((s.status(JOB) or {}).get("state") == "finished" for s in fed.sites), 600,
                     "the job to finish on every site")
        stop.set()
        for t in threads:
            t.join(timeout=60)
        sampler.close()
        statuses = {s.name: s.status(JOB) for s in fed.sites}
        digests = {st["anchor_digest"] for st in statuses.values()}
        if len(digests) != 1:
            fed.fail(f"the sites ended on different anchors: {digests}")
        syncs = []
        for s in fed.sites[1:]:
            found = RECEIVED.search(open(s.log_path).read())
            if found:
                syncs.append({"site": s.name, "from": found.group(2),
                              "holders": len(re.split(r", | and ", found.group(2))), "bytes": int(found.group(4)),
                              "seconds": float(found.group(5))})

    records = {n: {rec["round"]: rec for rec in st["rounds"]} for n, st in statuses.items()}
    # The restarted site lists its earlier rounds from disk, without their
    # costs (round_costs.h): those are read from its status before the restart.
    for rec in before_restart.get("rounds", []):
        records[second_name][rec["round"]] = rec
    out = []
    for row in rows:
        # A sample can name a later round than the last one seen (two rounds
        # committed between polls): each round's record is read by number.
        for rnd in range(out[-1]["round"] + 1 if out else 1, row["round"] + 1):
            recs = [records[n].get(rnd) for n in sites]
            if any(r is None or "costs" not in r for r in recs):
                continue
            costs = [r["costs"] for r in recs]
            stage_cpu = {k: sum(c["cpu_seconds"][k] for c in costs) for k in STAGES}
            daemon_cpu = sum(c["cpu_seconds"]["total"] - c["cpu_seconds"]["checkpoint"] for c in costs)
            wall = max(r["exchange_seconds"] for r in recs)
            per_link = max(r["bytes_sent"] for r in recs) / max(1, len(sites) - 1)
            # PLAN to the step applied waits two round trips: the all-reduce's two
            # one-way phases, and the COMMIT vote with COMMITTED back (the third
            # of common/wan_model.h, READY and the PLAN, lies before the span).
            link_bound = per_link * 8 / (args.rate * 1e6) + 2 * args.rtt / 1000 if capped else 0.0
            cpu_bound = (daemon_cpu + (row["proxy_cpu"] if rnd == row["round"] else 0.0)) / cores
            checkpoint = [c for c in costs if c["checkpoint_seconds"] is not None]
            peak = max(row["peak"][n] - base[n] for n in sites) / P
            lows = [row["low"][n] - base[n] for n in sites if row["low"][n] is not None]
            o = {"run": name, "params": P, "sites": len(sites), "round": rnd, "pipeline": "fp32" if raw else "q8+zstd",
                 "rate_mbit": args.rate if capped else None, "rtt_ms": args.rtt if capped else None,
                 "wall_s": wall, "link_bound_s": link_bound, "cpu_bound_s": cpu_bound,
                 "ratio_to_bound": wall / max(link_bound, cpu_bound) if max(link_bound, cpu_bound) > 0 else None,
                 "cpu_s_by_stage": stage_cpu, "daemon_cpu_s": daemon_cpu,
                 "core_s_per_gb": daemon_cpu / len(sites) / gb,
                 "decodes_per_chunk": max(c["decodes_per_chunk"] for c in costs),
                 "encodes_per_chunk": max(c["encodes_per_chunk"] for c in costs),
                 "bytes_sent_max": max(r["bytes_sent"] for r in recs),
                 "peak_rss_bytes_per_param": peak,
                 "peak_rss_bytes_per_param_by_site": {n: (row["peak"][n] - base[n]) / P for n in sites},
                 "between_rounds_rss_bytes_per_param": max(lows) / P if lows else None,
                 "round_log_s": max(c["round_log_seconds"] for c in costs),
                 # What the vote waited for the round log after the digest pass (it is written beside it).
                 "round_log_wait_s": max(c.get("round_log_wait_seconds", 0.0) for c in costs),
                 "checkpoint_wait_s": max(c.get("checkpoint_wait_seconds", 0.0) for c in costs),
                 # The longest a daemon's event loop was held at once: its heartbeats waited as long.
                 "loop_busy_s": max(c.get("loop_busy_seconds", 0.0) for c in costs),
                 "checkpoint_s": max(c["checkpoint_seconds"] for c in checkpoint) if checkpoint else None,
                 "checkpoint_bytes": max(c["checkpoint_bytes"] for c in checkpoint) if checkpoint else None,
                 # The sites checkpoint the same round at about the same time,
                 # on one disk here: together they share its speed.
                 "checkpoint_sites": len(checkpoint),
                 "checkpoint_all_bytes_per_s": (sum(c["checkpoint_bytes"] for c in checkpoint) /
                                                max(c["checkpoint_seconds"] for c in checkpoint)) if checkpoint else None,
                 "checkpoint_core_s_per_gb": (sum(c["cpu_seconds"]["checkpoint"] for c in checkpoint) /
                                              (sum(c["checkpoint_bytes"] for c in checkpoint) / 1e9)) if checkpoint else None,
                 "disk_bytes_per_s": disk}
            out.append(o)
    extra = {"run": name, "params": P, "sites": len(sites), "state_sync": syncs, "startup_s": startup,
             "link_rate_mbit": args.rate if capped else None, "rtt_ms": args.rtt if capped else None}
    return out, extra


def restart(fed, site, sampler, pids, restarts, digest):
    """Stops `site`'s daemon (SIGTERM) between rounds and starts it again: seconds from
    its start to its status showing the committed anchor `digest` (its checkpoint
    loaded and the round log replayed)."""
    restarts.set()
    kept = site.status(JOB) or {}
    site.kill(sig=15)
    started = time.monotonic()
    site.start()
    fed.wait_for(lambda: (site.status(JOB) or {}).get("anchor_digest") == digest, 600,
                 f"{site.name} to show the anchor {digest} again")
    seconds = time.monotonic() - started
    pids[site.name] = site.process.pid
    sampler.take()
    return seconds, kept


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def print_run(name, rows, extra, P):
    print(f"\n== {name}: {P:,} parameters, {rows[0]['sites'] if rows else '?'} sites, "
          f"{rows[0]['pipeline'] if rows else ''}"
          + (f", links {rows[0]['rate_mbit']:g} Mbit/s and {rows[0]['rtt_ms']:g} ms RTT" if rows and rows[0]['rate_mbit']
             else ", uncapped"))
    print(f"{'round':>5} {'wall s':>7} {'link bound':>10} {'cpu bound':>9} {'ratio':>6} {'core-s/GB':>9} "
          f"{'dec/chunk':>9} {'enc/chunk':>9} {'peak B/p':>8} {'low B/p':>7} {'log s':>6} {'log wait':>8} {'loop busy':>9} {'ckpt s':>7} {'ckpt MB/s':>9} "
          f"{'all MB/s':>8} {'disk MB/s':>9} {'waited s':>8}")
    for o in rows:
        ck = o["checkpoint_bytes"] / o["checkpoint_s"] / 1e6 if o["checkpoint_s"] else None
        print(f"{o['round']:>5} {o['wall_s']:7.2f} {o['link_bound_s']:10.2f} {o['cpu_bound_s']:9.2f} "
              f"{fmt(o['ratio_to_bound']):>6} {o['core_s_per_gb']:9.2f} {o['decodes_per_chunk']:9.2f} "
              f"{o['encodes_per_chunk']:9.2f} {o['peak_rss_bytes_per_param']:8.2f} "
              f"{fmt(o['between_rounds_rss_bytes_per_param']):>7} {o['round_log_s']:6.2f} "
              f"{o['round_log_wait_s']:8.2f} {o['loop_busy_s']:9.2f} {fmt(o['checkpoint_s']):>7} "
              f"{fmt(ck, '.0f'):>9} "
              f"{fmt(o['checkpoint_all_bytes_per_s'] / 1e6 if o['checkpoint_all_bytes_per_s'] else None, '.0f'):>8} "
              f"{o['disk_bytes_per_s'] / 1e6:9.0f} {o['checkpoint_wait_s']:8.2f}")
    print("(ratio: wall over the larger bound; log s: the round log's append, written beside the digest pass; "
          "log wait: what the vote waited for it once the digest was known; loop busy: the longest a daemon's event "
          "loop was held at once (its heartbeats waited as long; a site silent for the heartbeat timeout, 60 s by "
          "default, is counted dead); ckpt MB/s: the slowest site's checkpoint; all MB/s: every site's "
          "checkpoint of the round together, on this one disk; waited: the round's exchange waited for the last "
          "checkpoint)")
    written = [o for o in rows if o["checkpoint_core_s_per_gb"] is not None]
    if written:
        print("checkpoint CPU (the writer thread): " + ", ".join(
            f"round {o['round']} {o['checkpoint_core_s_per_gb']:.2f} core-s per GB written" for o in written))
    if rows:
        print("peak B/p by site: " + "; ".join(
            f"round {o['round']}: " + ", ".join(f"{n} {v:.2f}" for n, v in o["peak_rss_bytes_per_param_by_site"].items())
            for o in rows))
        print("CPU seconds by stage, summed over the sites (each round):")
        for o in rows:
            print(f"  round {o['round']}: " + ", ".join(f"{k} {v:.2f}" for k, v in o["cpu_s_by_stage"].items()))
    for s in extra["state_sync"]:
        # Request to state in place: the transfer, over as many links as it
        # had holders, and one round trip.
        bound = (s["bytes"] * 8 / (extra["link_rate_mbit"] * 1e6 * s["holders"]) + extra["rtt_ms"] / 1000
                 if extra["link_rate_mbit"] else None)
        print(f"STATE_SYNC {s['from']} -> {s['site']}: {s['bytes']:,} bytes in {s['seconds']:.2f} s "
              f"({s['bytes'] / s['seconds'] / 1e6:.0f} MB/s)" +
              (f", link bound {bound:.2f} s, ratio {s['seconds'] / bound:.2f}" if bound else ""))
    if extra["startup_s"] is not None:
        print(f"start-up from the checkpoint (SIGTERM between rounds, started again, until its status shows the "
              f"anchor): {extra['startup_s']:.2f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=256 << 20)
    ap.add_argument("--sites", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--checkpoint-every", type=int, default=2)
    ap.add_argument("--phase-seconds", type=float, default=8.0,
                    help="each trainer's inner phase: its walk, then idle (the checkpoint is written meanwhile)")
    ap.add_argument("--runs", default="q8-link,q8,raw-link,raw")
    ap.add_argument("--rate", type=rate_mbit, default=1000.0, metavar="R", help="each link's rate (bit/s; 1G)")
    ap.add_argument("--rtt", type=float, default=100.0, help="each link's round trip in ms")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one round may take before the run fails")
    ap.add_argument("--build", default=os.path.join(HERE, "../build"))
    ap.add_argument("--step-threads", type=int, default=None,
                    help="each site's step_threads (the passes' threads; default: the cores over the sites, "
                         "at least 1)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if not 2 <= args.sites <= len(NAMES):
        ap.error(f"--sites: 2 to {len(NAMES)}")
    runs = [r for r in args.runs.split(",") if r]
    for r in runs:
        if r not in ("q8-link", "q8", "raw-link", "raw"):
            ap.error(f"--runs: unknown run '{r}' (q8-link, q8, raw-link, raw)")
    layout, P = matrix_layout(args.params)
    for name in runs:
        rows, extra = run(args, name, P, layout)
        if args.json:
            for o in rows:
                print(json.dumps(o), flush=True)
            print(json.dumps(extra), flush=True)
        else:
            print_run(name, rows, extra, P)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
