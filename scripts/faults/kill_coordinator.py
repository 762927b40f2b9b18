"""kill -9 of the acting coordinator's site, with restarts: in the inner
phase, mid all-reduce, and mid STATE_SYNC as the donor (while a restarted
site is catching up from it). Its connections close with the process, so
the others count it out at once: a successor takes the office without
waiting out the heartbeat timeout, recovers the round in flight and the job
goes on while the old coordinator is down. Back, the old coordinator starts
from its journal, learns the newer office and follows it, catches up and
contributes; the site that was catching up gets its state. No round is
applied twice or lost. Ends with the history checker."""

import random
import time

from scenario import (Commits, Federation, arguments, contributes_after, epoch_of, link_name, mlp_job, run,
                      wait_for_transfer)

PHASES = ("inner", "allreduce", "sync-donor")
args = arguments(__doc__, repeat=1, rounds=30, down_seconds=3.0, phases=",".join(PHASES))
NAME = "kill-coordinator"


def acting(fed):
    """(epoch, site) of the office, as the live sites report it; the newest epoch wins."""
    best = (0, "")
    for s in fed.sites:
        if s.process is not None and s.process.poll() is None:
            best = max(best, epoch_of(s))
    return best


def body():
    rng = random.Random(args.seed)
    phases = [p for p in args.phases.split(",") if p]
    kills, restarts, handovers, killed = [], 0, [], set()
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        for link in fed.proxy.links:
            fed.proxy.set(link, both={"rate": "4M"})
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, width=64, deadline="2s",
                                                          min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        for i in range(args.repeat):
            for phase in phases:
                top = commits.poll()
                assert top < args.rounds - 4, f"the job is nearly over at round {top}: raise --rounds"
                epoch, name = acting(fed)
                k = fed[name]
                others = [s for s in fed.sites if s is not k]
                if phase == "sync-donor":
                    # A site restarted behind, asking the coordinator for the state when it dies.
                    c = others[-1]
                    c.kill()
                    commits.wait_round(top + 2, 120, f"two rounds without {c.name}")
                    size = len(open(c.log_path).read())
                    c.start()
                    restarts += 1
                    fed.wait_for(lambda: f"asking {k.name}" in open(c.log_path).read()[size:], 30,
                                 f"{c.name} to ask {k.name} for the state")
                    time.sleep(rng.uniform(0.0, 0.2))
                elif phase == "allreduce":
                    wait_for_transfer(fed, link_name(*sorted([k.name, others[0].name])))
                else:
                    commits.wait_round(top + 1, 60, "the next commit")
                    time.sleep(rng.uniform(0.05, 0.4))
                k.kill()
                killed.add(k.name)
                at = max(commits.rounds().values())
                kills.append(f"{phase}({k.name}, r{at})")
                print(f"killed the coordinator {k.name} (epoch {epoch}) in phase {phase} at round {at}", flush=True)
                started = time.monotonic()
                # Within the heartbeat timeout (4 s), so its closed connections, not its silence, moved the office.
                fed.wait_for(lambda: acting(fed)[0] > epoch, 3.5, f"a successor of {k.name} within 3.5 s")
                new_epoch, successor = acting(fed)
                handovers.append(time.monotonic() - started)
                commits.wait_round(at + 1, 30, f"a commit under {successor} while {k.name} is down")
                time.sleep(max(0.0, args.down_seconds - (time.monotonic() - started)))
                k.start()
                restarts += 1
                fed.wait_for(lambda: epoch_of(k)[0] >= new_epoch, 30,
                             f"{k.name} to follow the office of epoch {new_epoch}")
                contributes_after(fed, k, commits.poll())
                if phase == "sync-donor":
                    contributes_after(fed, c, at)
        commits.finished(300)
        checked = fed.check_history("e2e")
        assert f"restarts: {restarts}," in checked, checked
        assert any("coordinator resumes from its journal" in open(fed[n].log_path).read() for n in killed), \
            "no restarted coordinator resumed from its journal before following the new office"
    return (f"{len(kills)} coordinator kills ({', '.join(kills)}), {args.rounds} rounds, a successor "
            f"{max(handovers):.1f} s after the kill at most, longest stall {commits.longest_stall:.1f} s")


run(NAME, body)
