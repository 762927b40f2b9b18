"""The coordinator's site lost: kill -9 of it for good, a partition that
cuts it off from the majority, and SIGSTOP of it past three heartbeat
timeouts (woken, it journals no plan, commit or abort of its old epoch:
fenced means fenced). Each time the live sites elect a successor
(the most advanced committed round, then the order of `sites:`), which takes
office in a new epoch once a majority votes for it and commits on; the old
coordinator commits nothing more (fencing), and when it is back it learns the
epoch, rejoins as a participant and does not take the office back. Measures
the time from the loss to the successor's first commit against the heartbeat
timeout, and ends with the history checker: one digest per round, every
token counted once."""

import json
import os
import signal
import time

from scenario import (Commits, Federation, arguments, epoch_of, link_name, mlp_job, run, signal_site,
                      wait_for_transfer)

args = arguments(__doc__, rounds=40, bound=15.0, partition_seconds=12.0)
NAME = "coordinator-failover"



def body():
    notes = []
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        a, b, c = fed["site-a"], fed["site-b"], fed["site-c"]
        a.cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, width=64, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(3, 120, "round 3")

        # 1. The coordinator dies: a successor takes office and commits.
        a.kill()
        killed, at = time.monotonic(), max(commits.rounds().values())
        commits.wait_round(at + 1, args.bound + 60, "a commit after the coordinator's death")
        took = time.monotonic() - killed
        assert took <= args.bound, f"the successor's first commit came {took:.1f} s after the kill (bound {args.bound} s)"
        epoch, holder = epoch_of(b)
        assert (epoch, holder) == (1, "site-b"), f"site-b follows epoch {epoch} of {holder!r}"
        assert epoch_of(c) == (1, "site-b"), epoch_of(c)
        notes.append(f"kill -9 at round {at}: site-b took epoch 1, first commit {took:.1f} s later "
                     f"(heartbeat timeout {fed.heartbeat_timeout})")
        commits.wait_round(at + 3, 120, "three rounds under the successor")

        # The old coordinator comes back: it follows epoch 1 as a participant.
        a.start()
        fed.wait_for(lambda: epoch_of(a) == (1, "site-b"), 60, "site-a to follow epoch 1")
        top = commits.poll()
        fed.wait_for(lambda: any(r["contributed"] for r in (a.status("e2e") or {}).get("rounds", [])
                                 if r["round"] > top), 120, "site-a to contribute again")
        assert epoch_of(b) == (1, "site-b"), "the office moved back"

        # 2. The acting coordinator (site-b) is cut off from the majority.
        before = {s.name: (s.status("e2e") or {}).get("round", 0) for s in fed.sites}
        size = len(open(b.log_path).read())
        cut = time.monotonic()
        fed.proxy.partition(("site-b",), ("site-a", "site-c"))
        commits.wait_round(max(before.values()) + 2, args.bound + 60, "two commits on the majority side")
        took2 = time.monotonic() - cut
        remaining = max(args.partition_seconds - took2, 0)
        time.sleep(remaining)
        b_during = (b.status("e2e") or {}).get("round", 0)
        majority = max((a.status("e2e") or {}).get("round", 0), (c.status("e2e") or {}).get("round", 0))
        epoch2 = epoch_of(a)
        fed.proxy.heal()
        assert b_during <= before["site-b"] + 1, f"the cut-off coordinator committed rounds {before['site-b']}..{b_during}"
        assert epoch2[0] == 2 and epoch2[1] in ("site-a", "site-c"), f"the majority follows {epoch2}"
        fed.wait_for(lambda: epoch_of(b) == epoch2, 60, f"site-b to follow epoch {epoch2[0]}")
        log = open(b.log_path).read()[size:]
        assert "no longer coordinates" in log or "stops coordinating" in log, "site-b never said it stopped coordinating"
        notes.append(f"site-b cut off at round {before['site-b']}: {epoch2[1]} took epoch 2, two commits "
                     f"{took2:.1f} s later, site-b held at {b_during} while the majority reached {majority}")

        # 3. The acting coordinator stands still (SIGSTOP) past three heartbeat
        #    timeouts: a successor takes a newer epoch; woken, the old one
        #    decides nothing more in its epoch (no plan, commit or abort
        #    journaled under it) and follows.
        #    It is stopped while it waits for COMMITs: its trainer first, so
        #    that the next round is planned without it, then, while the two
        #    others exchange over a slowed link, its daemon; their COMMITs
        #    wait in its sockets for when it wakes.
        old = fed[epoch2[1]]
        others = [s for s in fed.sites if s is not old]
        top = commits.poll()
        assert top < args.rounds - 6, f"the job is nearly over at round {top}: raise --rounds"
        journal = os.path.join(old.dir, "data", "jobs", "e2e", "journal")
        fed.proxy.set(link_name(others[0].name, others[1].name), both={"rate": "4M"})
        for pid in old.trainer_pids():
            os.kill(pid, signal.SIGSTOP)
        commits.wait_round(top + 2, 60, f"a round planned without {old.name}'s trainer")
        wait_for_transfer(fed, link_name(others[0].name, others[1].name))
        signal_site(old, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            stopped_at = max(commits.rounds().values())
            journaled = os.path.getsize(journal)
            commits.wait_round(stopped_at + 2, args.bound + 60, f"two commits while {old.name} stands still")
            time.sleep(max(0.0, 3 * float(fed.heartbeat_timeout.rstrip("s")) - (time.monotonic() - frozen)))
        finally:
            signal_site(old, signal.SIGCONT)
        epoch3 = epoch_of(others[0])
        assert epoch3[0] > epoch2[0] and epoch3[1] != old.name, f"no successor took office: {epoch3}"
        fed.wait_for(lambda: epoch_of(old) == epoch3, 60, f"{old.name} to follow epoch {epoch3[0]}")
        with open(journal) as f:
            f.seek(journaled)
            after = [json.loads(line[line.index("{"):]) for line in f if "{" in line]
        decided = [r for r in after if r.get("type") in ("plan", "committed", "abort") and r.get("epoch") == epoch2[0]]
        assert not decided, f"{old.name}, deposed, journaled decisions of its old epoch {epoch2[0]}: {decided}"
        notes.append(f"{old.name} stood still at round {stopped_at}: {epoch3[1]} took epoch {epoch3[0]}; woken, "
                     f"{old.name} journaled nothing of epoch {epoch2[0]}")

        commits.finished(300)
        fed.check_history("e2e")  # fails the scenario on any violation
    return "; ".join(notes) + f"; all 3 sites finished {args.rounds} rounds on one digest"


run(NAME, body)
