"""Every site of the federation down at once, daemons and trainers, and all
started again together: kill -9 in the inner phase, mid all-reduce and right
after a commit, then SIGTERM, with checkpoints only every 5 rounds. No site
holds a checkpoint of the last committed round, so each rebuilds it from its
checkpoint and its round log (the averaged Δ of the rounds since, made
durable before it voted). The job resumes on the last committed round and
finishes: no round lost, none applied twice, one digest per round. Ends
with the history checker."""

import os
import random
import signal
import time

from scenario import Commits, Federation, arguments, history_events, link_name, mlp_job, run, wait_for_transfer

PHASES = ("inner", "allreduce", "after-commit", "sigterm")
args = arguments(__doc__, rounds=30, every=5, phases=",".join(PHASES))
NAME = "federation-crash"


def down_all(fed, sig):
    """Signals every daemon (and with SIGKILL every trainer) as close to at
    once as a script can: every process is looked up first."""
    daemons = [s.process for s in fed.sites if s.process and s.process.poll() is None]
    trainers = [pid for s in fed.sites for pid in s.trainer_pids()] if sig == signal.SIGKILL else []
    for p in daemons:
        try:
            if sig == signal.SIGKILL:
                os.killpg(p.pid, signal.SIGKILL)
            else:
                p.send_signal(sig)
        except ProcessLookupError:
            pass
    for pid in trainers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in daemons:
        p.wait(timeout=60)


def committed_rounds(fed):
    """The highest round each site's history says it committed (its disk, read with every site down)."""
    return {s.name: max([e["round"] for e in history_events(s) if e.get("event") == "committed"], default=0)
            for s in fed.sites}


def body():
    rng = random.Random(args.seed)
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        assert p in PHASES, f"unknown phase {p} (expected {', '.join(PHASES)})"
    crashes, replays = [], 0
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        for link in fed.proxy.links:
            fed.proxy.set(link, both={"rate": "4M"})
        fed["site-a"].cli("submit", fed.write_job(
            mlp_job(rounds=args.rounds, steps=20, width=64, deadline="2s", min_sites=2, every=args.every)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        for phase in phases:
            top = commits.poll()
            assert top < args.rounds - 4, f"the job is nearly over at round {top}: raise --rounds"
            # A crash where the last committed round is no checkpoint's.
            while commits.poll() % args.every == 0:
                time.sleep(0.05)
            if phase == "allreduce":
                wait_for_transfer(fed, link_name("site-a", "site-b"))
            elif phase == "after-commit":
                at = commits.poll()
                commits.wait_round(at + 1, 60, "the next commit")
                time.sleep(rng.uniform(0.0, 0.05))
            else:
                time.sleep(rng.uniform(0.05, 0.4))
            sizes = {s.name: len(open(s.log_path).read()) for s in fed.sites}
            down_all(fed, signal.SIGTERM if phase == "sigterm" else signal.SIGKILL)
            held = committed_rounds(fed)
            last = max(held.values())
            crashes.append(f"{phase}(r{last})")
            print(f"every site down ({phase}) with rounds {held} committed", flush=True)
            time.sleep(0.5)
            for s in fed.sites:
                s.start()
            # Resumed on the last committed round: the next rounds commit, and
            # each site's history goes on from there (the checker sees a round
            # committed twice with another anchor, or one missing).
            commits.wait_round(last + 2, 120, f"two commits after the restart from round {last}")
            logs = {s.name: open(s.log_path).read()[sizes[s.name]:] for s in fed.sites}
            replayed = [n for n, text in logs.items() if "replayed from the round log" in text]
            if phase != "sigterm" and last % args.every != 0:
                # kill -9 leaves checkpoints of a round before the last
                # committed one: a site rebuilt it from its round log.
                assert replayed, f"no site rebuilt round {last} from its round log after the {phase} crash"
            elif phase != "sigterm":
                # The round committed between the scenario's look and the
                # kill was a checkpoint's: the checkpoint holds it (a load
                # of it, no replay, is what the crash causes then).
                loaded = [n for n, text in logs.items() if f"checkpoint of round {last} loaded" in text]
                assert loaded, f"no site loaded its checkpoint of round {last} after the {phase} crash"
                crashes[-1] += " on a checkpoint"
            replays += len(replayed)
            for n, text in logs.items():
                assert "cannot rebuild the committed state" not in text, f"{n}: {text}"
        commits.finished(300)
        fed.check_history("e2e")
    return (f"{len(crashes)} whole-federation crashes ({', '.join(crashes)}), {args.rounds} rounds, checkpoint every "
            f"{args.every}; {replays} site restarts rebuilt their state from the round log")


run(NAME, body)
