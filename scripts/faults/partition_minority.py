"""One site of three cut off for several rounds (min_sites 2), then healed:
the two-site majority goes on committing, the cut-off site commits nothing
on its own, and after the heal it rejoins (taking the committed state from
a peer) and every site ends on the same digest. Ends with the history
checker."""

import time

from scenario import Commits, Federation, arguments, contributes_after, mlp_job, run

args = arguments(__doc__, repeat=1, rounds=30, partition_seconds=8.0)
NAME = "partition-minority"


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "40"
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        notes = []
        for i in range(args.repeat):
            commits.wait_round(commits.poll() + 2, 120, "two more rounds")
            c_before = fed["site-c"].status("e2e")["round"]
            majority_before = commits.poll()
            fed.proxy.partition(("site-a", "site-b"), ("site-c",))
            time.sleep(args.partition_seconds)
            majority = commits.poll()
            c_during = fed["site-c"].status("e2e")["round"]
            fed.proxy.heal()
            assert majority >= majority_before + 2, f"the majority committed only {majority - majority_before} rounds"
            assert c_during <= c_before + 1, f"site-c committed rounds {c_before}..{c_during} on its own"
            # Back in before the next cut: it rejoins and contributes again.
            contributes_after(fed, fed["site-c"], majority)
            notes.append(f"majority {majority_before}->{majority}, site-c held at {c_during}, then back")
        commits.finished(300)
        fed.check_history("e2e")
        c = fed["site-c"].status("e2e")
        assert c["round"] == args.rounds, c
    return f"{'; '.join(notes)}; all 3 sites finished {args.rounds} rounds on one digest"


run(NAME, body)
