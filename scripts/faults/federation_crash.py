"""Every site of the federation down at once, daemons and trainers, and all
started again together: kill -9 in the inner phase, mid all-reduce, between
the votes and the outcome (a site's COMMIT journaled, its round's COMMITTED
not, the coordinator frozen there), that crash again with the old
coordinator started last (once the others elected a successor, which
completes or aborts the voted round), right after a commit, then SIGTERM;
with checkpoints only every 5 rounds. No site holds a checkpoint of the last committed round, so each rebuilds it from its
checkpoint and its round log (the averaged Δ of the rounds since, made
durable before it voted). The job resumes on the last committed round and
finishes: no round lost, none applied twice, one digest per round. Ends
with the history checker."""

import json
import os
import random
import re
import signal
import time

from scenario import (Commits, Federation, arguments, epoch_of, history_events, link_name, mlp_job, run, signal_site,
                      wait_for_transfer)

PHASES = ("inner", "allreduce", "commit", "commit-elect", "commit-lost-entry", "after-commit", "sigterm")
# "commit-elect": the "commit" crash with the old coordinator started
# again only once the others elected a successor. "commit-lost-entry": the
# same, with one voter's round-log entry of the voted round deleted while
# it is down (a damaged disk): that voter cannot step the round and takes
# it from a peer that did. Only when another voter holds the round: a
# successor completes a round from any vote it hears, and the only copy
# deleted would be a round no site can give.
VOTED = ("commit", "commit-elect", "commit-lost-entry")
args = arguments(__doc__, rounds=40, every=5,
                 phases="inner,allreduce,commit,commit-elect,commit-lost-entry,after-commit,sigterm")
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


def last_record(site):
    """The last whole record of a site's journal (read while it runs)."""
    with open(os.path.join(site.dir, "data", "jobs", "e2e", "journal")) as f:
        lines = [line for line in f if line.endswith("\n") and line.strip()]
    return json.loads(lines[-1].split(" ", 1)[1]) if lines else {}


def journal_commits(site):
    """The rounds a site's journal says committed (read with the site down)."""
    with open(os.path.join(site.dir, "data", "jobs", "e2e", "journal")) as f:
        records = [json.loads(line.split(" ", 1)[1]) for line in f if line.endswith("\n") and line.strip()]
    return {r["round"] for r in records if r.get("type") == "committed"}


def voted(site):
    """The round whose COMMIT `site` journaled and whose outcome it has not learned, if any."""
    r = last_record(site)
    return r.get("round") if r.get("type") == "pending" and not r.get("none") else None


def freeze_between_vote_and_outcome(fed, seconds=60):
    """Freezes the acting coordinator (SIGSTOP) at a moment when a voter has
    journaled its COMMIT of a round and not its outcome; returns (the
    coordinator, the round, the voters still waiting). A freeze that came
    too late (every vote answered) is undone and tried at the next round."""
    office = epoch_of(fed["site-b"])[1] or "site-a"
    voters = [s for s in fed.sites if s.name != office]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(voted(s) for s in voters):
            time.sleep(0.002)
            continue
        signal_site(fed[office], signal.SIGSTOP)
        waiting = {s.name: voted(s) for s in voters if voted(s)}
        if waiting:
            return office, max(waiting.values()), sorted(waiting)
        signal_site(fed[office], signal.SIGCONT)
    raise AssertionError(f"no vote of a round was seen waiting for its outcome in {seconds} s")


def committed_rounds(fed):
    """The highest round each site's history says it committed (its disk, read with every site down)."""
    return {s.name: max([e["round"] for e in history_events(s) if e.get("event") == "committed"], default=0)
            for s in fed.sites}


def body():
    rng = random.Random(args.seed)
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        assert p in PHASES, f"unknown phase {p} (expected {', '.join(PHASES)})"
    crashes, replays, voted_steps = [], 0, 0
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
            elif phase in VOTED:
                # Neither this round nor the one voted on a checkpoint's: the
                # restart rebuilds from the round log whichever the outcome.
                while commits.poll() % args.every in (0, args.every - 1):
                    time.sleep(0.05)
                office, voting, waiting = freeze_between_vote_and_outcome(fed)
                print(f"{office} (the coordinator) frozen while {', '.join(waiting)} wait for the outcome of "
                      f"round {voting}", flush=True)
            elif phase == "after-commit":
                at = commits.poll()
                commits.wait_round(at + 1, 60, "the next commit")
                time.sleep(rng.uniform(0.0, 0.05))
            else:
                time.sleep(rng.uniform(0.05, 0.4))
            sizes = {s.name: len(open(s.log_path).read()) for s in fed.sites}
            down_all(fed, signal.SIGTERM if phase == "sigterm" else signal.SIGKILL)
            for s in fed.sites:
                s.frozen = False
            held = committed_rounds(fed)
            last = max(held.values())
            crashes.append(f"{phase}(r{last})")
            lost_entry = None
            one_voter = False
            if phase == "commit-lost-entry" and len(waiting) < 2:
                # A voter's entry is deleted only when another voter holds
                # the round: the only copy of a round that a successor
                # completes from its vote, deleted, is a round no site can
                # give (a double fault this scenario does not claim to survive).
                one_voter = True
            elif phase == "commit-lost-entry":
                lost_entry = waiting[0]
                entry = os.path.join(fed[lost_entry].dir, "data", "jobs", "e2e", "deltas", f"round-{voting:020d}.delta")
                assert os.path.exists(entry), f"{lost_entry} voted for round {voting} but has no {entry}"
                os.remove(entry)
            if phase in VOTED:
                # Frozen before or after its decision: both are crashes in the commit phase.
                decided = voting in journal_commits(fed[office])
                crashes[-1] = f"{phase}(r{voting} {'decided' if decided else 'undecided'})"
                if one_voter:
                    crashes[-1] += " (one voter: no entry deleted)"
            print(f"every site down ({phase}) with rounds {held} committed", flush=True)
            time.sleep(0.5)
            if phase in ("commit-elect", "commit-lost-entry"):
                # The old coordinator comes back last: the voters elect one
                # of themselves, which completes the voted round from the
                # votes (when they make a majority) or aborts it; each voter
                # that restarted on the round before steps it from its own
                # round log.
                for s in fed.sites:
                    if s.name != office:
                        s.start()
                successors = lambda: {epoch_of(s)[1] for s in fed.sites if s.name != office} - {"", office}
                fed.wait_for(successors, 60, f"a successor to {office}")
                print(f"{', '.join(sorted(successors()))} elected while {office} is down", flush=True)
            for s in fed.sites:
                if s.process is None or s.process.poll() is not None:
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
            # A voter restarted on the round before its vote steps the round
            # from its round log once its outcome names that vote (counted
            # when the stepped round is recorded, not when it is begun).
            voted_steps += sum(len(re.findall(r"round \d+ committed: .*, from the round log, anchor", text))
                               for text in logs.values())
            for n, text in logs.items():
                assert "cannot rebuild the committed state" not in text, f"{n}: {text}"
                if n != lost_entry:
                    assert "cannot be stepped from the round log" not in text, f"{n}: {text}"
                elif "cannot be stepped from the round log" in text:
                    # Its vote was committed: it said why it could not step
                    # the round, and took the state from a peer instead.
                    assert f"round {voting} cannot be stepped from the round log: the round log has no" in text, text
                    crashes[-1] += f" ({n}, without its entry, took it from a peer)"
        commits.finished(300)
        fed.check_history("e2e")
    return (f"{len(crashes)} whole-federation crashes ({', '.join(crashes)}), {args.rounds} rounds, checkpoint every "
            f"{args.every}; {replays} site restarts rebuilt their state from the round log, {voted_steps} stepped a round "
            f"they had voted for from it")


run(NAME, body)
