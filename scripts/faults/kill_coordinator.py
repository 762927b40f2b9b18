"""kill -9 of the coordinator's site, with restarts: in the inner phase, mid
all-reduce, and mid STATE_SYNC as the donor (while a restarted site is
catching up from it). Nobody commits while it is down (the coordinator
plans every round); when it comes back it resumes from its journal, the
round in flight is planned again, no round is applied twice or lost, and the
site that was catching up gets its state. Ends with the history checker."""

import random
import time

from scenario import Commits, Federation, arguments, contributes_after, link_name, mlp_job, run, wait_for_transfer

PHASES = ("inner", "allreduce", "sync-donor")
args = arguments(__doc__, repeat=1, rounds=30, down_seconds=3.0, phases=",".join(PHASES))
NAME = "kill-coordinator"


def body():
    rng = random.Random(args.seed)
    phases = [p for p in args.phases.split(",") if p]
    kills, restarts = [], 0
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        for link in fed.proxy.links:
            fed.proxy.set(link, both={"rate": "4M"})
        a, c = fed["site-a"], fed["site-c"]
        a.cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, width=64, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        for i in range(args.repeat):
            for phase in phases:
                top = commits.poll()
                assert top < args.rounds - 4, f"the job is nearly over at round {top}: raise --rounds"
                if phase == "sync-donor":
                    c.kill()
                    commits.wait_round(top + 2, 120, "two rounds without site-c")
                    size = len(open(c.log_path).read())
                    c.start()
                    restarts += 1
                    fed.wait_for(lambda: "asking site-a" in open(c.log_path).read()[size:], 30,
                                 "site-c to ask site-a for the state")
                    time.sleep(rng.uniform(0.0, 0.2))
                elif phase == "allreduce":
                    wait_for_transfer(fed, link_name("site-a", "site-b"))
                else:
                    commits.wait_round(top + 1, 60, "the next commit")
                    time.sleep(rng.uniform(0.05, 0.4))
                a.kill()
                at = max(commits.rounds().values())
                kills.append(f"{phase}(r{at})")
                print(f"killed the coordinator in phase {phase} at round {at}", flush=True)
                time.sleep(args.down_seconds)
                stalled = max(commits.rounds().values())
                assert stalled <= at + 1, f"rounds {at}..{stalled} committed while the coordinator was down"
                a.start()
                restarts += 1
                commits.wait_round(stalled + 1, 120, "a commit after the coordinator's restart")
                if phase == "sync-donor":
                    contributes_after(fed, c, at)
        commits.finished(300)
        checked = fed.check_history("e2e")
        assert f"restarts: {restarts}," in checked, checked
        assert "coordinator resumes from its journal" in open(a.log_path).read()
    return (f"{len(kills)} coordinator kills ({', '.join(kills)}), {args.rounds} rounds, longest stall "
            f"{commits.longest_stall:.1f} s")


run(NAME, body)
