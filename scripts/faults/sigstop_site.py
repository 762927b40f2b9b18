"""SIGSTOP of a site (its daemon and trainer, as a frozen machine) for longer
than the heartbeat timeout, then SIGCONT, several times and at random
moments. The others leave it out and go on; when it wakes up, what it sends
of the rounds it slept through is refused, it catches up and contributes
again, and every site ends with one digest per round. Ends with the history
checker."""

import random
import signal
import time

from scenario import Commits, Federation, arguments, contributes_after, mlp_job, run, signal_site

args = arguments(__doc__, repeat=2, rounds=40, stop_seconds=8.0)
NAME = "sigstop-site"


def body():
    rng = random.Random(args.seed)
    notes = []
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        for i in range(args.repeat):
            victim = fed[rng.choice(("site-b", "site-c"))]
            top = commits.poll()
            assert top < args.rounds - 6, f"the job is nearly over at round {top}: raise --rounds"
            time.sleep(rng.uniform(0.0, 0.6))
            signal_site(victim, signal.SIGSTOP)
            stopped_at = max(commits.rounds().values())
            try:
                time.sleep(args.stop_seconds)
                went_on = commits.poll()
            finally:
                signal_site(victim, signal.SIGCONT)
            assert went_on >= stopped_at + 2, f"only rounds {stopped_at}..{went_on} committed while {victim.name} slept"
            contributes_after(fed, victim, went_on)
            notes.append(f"{victim.name} stopped at round {stopped_at}, others reached {went_on}")
            print(notes[-1], flush=True)
        commits.finished(300)
        fed.check_history("e2e")
    return f"{'; '.join(notes)}; {args.rounds} rounds, longest stall {commits.longest_stall:.1f} s"


run(NAME, body)
