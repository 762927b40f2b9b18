"""What bench/utilization.py and bench/slow_site.py share: three geolocod
daemons on loopback, every pair of sites through geoloco-faultproxy set to
one link (one-way delay RTT/2 and a rate cap, both ways), each site's
trainer slowed by GEOLOCO_TRAIN_STEP_DELAY_MS, the demo's GPT as the job,
and the figures a run leaves: the sites' statuses and what every trainer
logged about its time (computed C of the W s since the last sync)."""

import argparse
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/e2e"))
from federation import Federation, link_name  # noqa: E402

SITES = ("site-a", "site-b", "site-c")
SYNC_LINE = re.compile(r"computed ([0-9.]+) of the ([0-9.]+) s since the last sync")
STEPS_LINE = re.compile(r": (\d+) steps in ([0-9.]+) s")
SKIP_SYNCS = 2  # the first syncs' intervals hold the sites' start-up skew
DEFAULT_BUILD = os.environ.get("GEOLOCO_BUILD", os.path.join(HERE, "../build"))


def arguments(doc, runs):
    """A bench's command line: its docstring as the help, and the options
    both benches take (--only among `runs`, --build, --keep, --json); the
    caller adds its own and parses."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help=f"comma-separated runs ({', '.join(runs)})")
    p.add_argument("--build", default=DEFAULT_BUILD)
    p.add_argument("--keep", action="store_true", help="keep the federations' folders (logs) and print where")
    p.add_argument("--json", action="store_true")
    return p


def gpt_job(name, inner, outer, straggler, rounds, compression="[{quantize: {bits: 8}}, zstd]", extra=""):
    """The demo's GPT (configs/jobs/demo.yaml) with the given sections."""
    comp = f"compression: {compression}\n" if compression else ""
    return f"""name: {name}
sites: [{', '.join(SITES)}]
coordinator: site-a
seed: 1
trainer: {{kind: builtin, model: gpt, layers: 2, width: 128, heads: 4, context: 64, workers: 1}}
inner: {{optimizer: adamw, lr: 0.004, batch: 16, warmup: 20, weight_decay: 0.01, clip: 1.0, {inner}}}
outer: {outer}
{comp}straggler: {straggler}
checkpoint: {{every_rounds: 1000}}
{extra}stop: {{rounds: {rounds}}}
"""


def wan_federation(build, rate, rtt_ms, step_ms, keep=False):
    """A started federation whose links all have `rate` and `rtt_ms`;
    step_ms: each site's GEOLOCO_TRAIN_STEP_DELAY_MS (a dict by name)."""
    fed = Federation(build=build, proxy=True, heartbeat_timeout="30s", read_timeout="10s", keep=keep)
    try:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = str(step_ms[s.name])
        fed.start()
        for i, a in enumerate(SITES):
            for b in SITES[i + 1:]:
                fed.proxy.set(link_name(a, b), both={"latency": f"{rtt_ms / 2:g}ms", "rate": rate})
    except BaseException:
        fed.close()
        raise
    if keep:
        print(f"the federation's folder is {fed.root}", flush=True)
    return fed


def trainer_log(site, job):
    return open(os.path.join(site.dir, "data", "jobs", job, "trainer.log")).read()


def trainer_figures(site, job):
    """One site's trainer: the steady compute share, seconds per step and
    per sync interval (from the third sync on), the steps it took (those
    it synced when it was stopped mid-phase), the run's share and its
    seconds of evaluations (every anchor's, and the last; None when stopped)."""
    text = trainer_log(site, job)
    syncs = [(float(c), float(w)) for c, w in SYNC_LINE.findall(text)]
    steps = [int(n) for n, _ in STEPS_LINE.findall(text)]
    total = re.search(r"compute share ([0-9.]+)%: [0-9.]+ s in steps of the loop's [0-9.]+ s without its ([0-9.]+) s "
                      r"of evaluations", text)
    done = re.search(r"done: (\d+) steps", text)  # absent when the trainer was stopped mid-phase
    steady = syncs[SKIP_SYNCS:]
    compute, wall = sum(c for c, _ in steady), sum(w for _, w in steady)
    steady_steps = sum(steps[SKIP_SYNCS:])
    # A straggler stopped early may not reach the steady syncs: its step
    # time then comes from every sync (compute counts steps, never waits).
    all_compute, all_steps = sum(c for c, _ in syncs), sum(steps)
    return {
        "steady_share": compute / wall if wall > 0 else None,
        "run_share": float(total.group(1)) / 100 if total else None,
        "eval_seconds": float(total.group(2)) if total else None,
        "step_seconds": compute / steady_steps if steady_steps else all_compute / all_steps if all_steps else None,
        "sync_interval_seconds": wall / len(steady) if steady else None,
        "syncs": len(syncs),
        "steps": int(done.group(1)) if done else sum(steps),
    }


def run_job(fed, name, text, seconds=900):
    """Submits a job, waits (bounded) until every site finished it and every
    trainer exited; returns the wall time, the statuses and
    each trainer's figures. Fails when the sites' anchors differ."""
    start = time.monotonic()
    fed["site-a"].cli("submit", fed.write_job(text, name + ".yaml"))
    fed.wait_for(lambda: all((s.status(name) or {}).get("state") == "finished" for s in fed.sites), seconds,
                 f"job {name} to finish")
    wall = time.monotonic() - start
    statuses = {s.name: s.status(name) for s in fed.sites}
    assert len({st["anchor_digest"] for st in statuses.values()}) == 1, f"{name}: the sites' anchors differ"
    # Every trainer has exited: a trainer still inside a phase when the job
    # ended (a straggler's) is stopped without its last line.
    fed.wait_for(lambda: not any(s.trainer_pids() for s in fed.sites), 60, f"{name}'s trainers to exit")
    return {"seconds": wall, "statuses": statuses, "trainers": {s.name: trainer_figures(s, name) for s in fed.sites}}
