"""kill -9 of a site (daemon and trainer, as a machine dies) at a random
moment of each phase of a round, several times, each followed by a restart:
in the inner phase, mid all-reduce, right after a commit (while the
checkpoint is written), and mid STATE_SYNC as the receiver (the restarted
site catching up). The victim's links are slowed (4 Mbit/s) so that
transfers take long enough to be hit. The job goes on without the dead site,
the site rejoins, and in the end every site holds one digest per round and
every token is committed, dropped with a reason, or lost with a killed
site's memory. Ends with the history checker."""

import random
import time

from scenario import Commits, Federation, arguments, contributes_after, link_name, mlp_job, run, wait_for_transfer

PHASES = ("inner", "allreduce", "checkpoint", "sync-receiver")
args = arguments(__doc__, repeat=1, rounds=40, phases=",".join(PHASES))
NAME = "kill-site"


def body():
    rng = random.Random(args.seed)
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        assert p in PHASES, f"unknown phase {p} (expected {', '.join(PHASES)})"
    kills = []
    restarts = 0
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        for victim in ("site-b", "site-c"):
            for peer in fed.sites:
                if peer.name != victim:
                    fed.proxy.set(link_name(victim, peer.name), both={"rate": "4M"})
        fed["site-a"].cli("submit", fed.write_job(
            mlp_job(rounds=args.rounds, steps=20, width=64, deadline="2s", min_sites=2, every=1,
                    compression="[{quantize: {bits: 8}}, zstd]")))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        for i in range(args.repeat):
            for phase in phases:
                victim = fed[rng.choice(("site-b", "site-c"))]
                top = commits.poll()
                assert top < args.rounds - 4, f"the job is nearly over at round {top}: raise --rounds"
                if phase == "sync-receiver":
                    # Kill it once, let rounds pass, restart it and kill it again while it catches up.
                    victim.kill()
                    commits.wait_round(top + 2, 120, "two rounds without the victim")
                    log_size = len(open(victim.log_path).read())
                    victim.start()
                    restarts += 1
                    fed.wait_for(lambda: "catching up" in open(victim.log_path).read()[log_size:], 30,
                                 f"{victim.name} to start catching up")
                    time.sleep(rng.uniform(0.0, 0.3))
                    victim.kill()
                    hit = "received from" not in open(victim.log_path).read()[log_size:]
                elif phase == "allreduce":
                    # Wait for bytes to flow on the victim's slowed link, then kill.
                    wait_for_transfer(fed, link_name("site-a", victim.name))
                    victim.kill()
                    hit = True
                else:
                    commits.wait_round(top + 1, 60, "the next commit")
                    time.sleep(rng.uniform(0.0, 0.05) if phase == "checkpoint" else rng.uniform(0.05, 0.4))
                    victim.kill()
                    hit = True
                at = commits.poll()
                kills.append(f"{victim.name}@{phase}(r{at}{'' if hit else ', after the transfer'})")
                print(f"killed {victim.name} in phase {phase} at round {at}", flush=True)
                commits.wait_round(at + 1, 120, f"a commit without {victim.name}")
                victim.start()
                restarts += 1
                contributes_after(fed, victim, at + 1)
        commits.finished(300)
        checked = fed.check_history("e2e")
        assert f"restarts: {restarts}," in checked, checked
        # A survivor whose exchange a kill broke encoded through its residual
        # (q8 with error feedback): that range starts again from zero.
        logs = [open(s.log_path).read() for s in fed.sites]
        dropped = sum(log.count("starts again from zero") for log in logs)
        broken = sum(log.count("connections closed during the exchange") for log in logs)
        assert not broken or dropped, f"{broken} exchange(s) broken by a kill, and no residual range dropped"
    return (f"{len(kills)} kills ({', '.join(kills)}), {args.rounds} rounds, longest stall {commits.longest_stall:.1f} s, "
            f"{dropped} residual range(s) dropped")


run(NAME, body)
