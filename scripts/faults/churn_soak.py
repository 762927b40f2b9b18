"""A churn soak: for a set duration, random faults one after another on a
running job: kill -9 and restart of any site (the acting coordinator half
the time, so its office moves), a site partitioned away, a flapping link, a
slow link, a site frozen by SIGSTOP.
At most one fault at a time, so a majority can always go on once the fault
ends. Fails if no round commits for --stall-limit seconds (5 minutes by
default), or if the history checker finds a violation at the end.

    churn_soak.py --duration 600 --seed 3"""

import os
import random
import signal
import time

from scenario import Commits, Federation, arguments, link_name, mlp_job, run

args = arguments(__doc__, duration=120.0, stall_limit=300.0, rounds=0)
NAME = "churn-soak"
SITES = ("site-a", "site-b", "site-c")


def acting_coordinator(fed):
    """The office holder as a live site sees it ("" while unknown)."""
    for s in fed.sites:
        if s.process and s.process.poll() is None and not getattr(s, "frozen", False):
            holder = (s.status("e2e") or {}).get("coordinator", "")
            if holder:
                return holder
    return ""


def body():
    rng = random.Random(args.seed)
    rounds = args.rounds or max(40, int(args.duration / 1.2) + 20)
    counts, on_acting = {}, 0
    with Federation(names=SITES, proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "40"
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(mlp_job(sites=SITES, rounds=rounds, steps=20, deadline="2s",
                                                          min_sites=2, every=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        start = time.monotonic()

        def watch(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                top = commits.poll()
                assert commits.longest_stall < args.stall_limit, \
                    f"no commit for {commits.longest_stall:.0f} s (limit {args.stall_limit:.0f} s) at round {top}"
                time.sleep(0.5)

        while time.monotonic() - start < args.duration and commits.poll() < rounds - 10:
            kind = rng.choice(("kill", "partition", "flap", "slow", "sigstop"))
            counts[kind] = counts.get(kind, 0) + 1
            length = rng.uniform(2.0, 8.0)
            site = fed[rng.choice(SITES)]
            acting = acting_coordinator(fed)
            if kind in ("kill", "partition", "sigstop") and acting and rng.random() < 0.5:
                site = fed[acting]  # the office holder: a fault past the heartbeat timeout moves the office
            on_acting += site.name == acting
            print(f"t={time.monotonic() - start:.0f}s round {commits.poll()}: {kind} {site.name} for {length:.1f} s",
                  flush=True)
            if kind == "kill":
                site.kill()
                watch(length)
                site.start()
            elif kind == "partition":
                fed.proxy.partition((site.name,), tuple(s for s in SITES if s != site.name))
                watch(length)
                fed.proxy.heal()
            elif kind in ("flap", "slow"):
                other = rng.choice([s for s in SITES if s != site.name])
                change = {"flap": {"period": "2s", "down": "300ms"}} if kind == "flap" else \
                    {"both": {"rate": "2M", "latency": "100ms", "jitter": "20ms"}}
                fed.proxy.set(link_name(site.name, other), **change)
                watch(length)
                fed.proxy.heal()
            else:
                site.frozen = True
                os.killpg(site.process.pid, signal.SIGSTOP)
                for pid in site.trainer_pids():
                    os.kill(pid, signal.SIGSTOP)
                try:
                    watch(length)
                finally:
                    for pid in site.trainer_pids():
                        os.kill(pid, signal.SIGCONT)
                    os.killpg(site.process.pid, signal.SIGCONT)
                    site.frozen = False
            watch(rng.uniform(1.0, 4.0))
        churned = time.monotonic() - start
        commits.finished(600)
        checked = fed.check_history("e2e")
        epoch = max((s.status("e2e") or {}).get("epoch", 0) for s in fed.sites)
    faults = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    tokens = [l for l in checked.splitlines() if l.startswith("tokens:")]
    return (f"{churned:.0f} s of churn ({faults}; {on_acting} of them on the acting coordinator), {rounds} rounds, "
            f"{epoch} successor(s) took office (epoch {epoch} at the end), longest stall {commits.longest_stall:.1f} s (limit {args.stall_limit:.0f} s); "
            f"{tokens[0] if tokens else ''}")


run(NAME, body)
