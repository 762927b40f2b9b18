"""A 2/2 partition of four sites with min_sites 3, then healed, several times
(--reset-mid 1: the cut links are also reset halfway through, so what they
held is lost rather than delivered at the heal).

No side has min_sites during the split, so nobody commits; after the heal
the job must commit again within a few heartbeats, every time. The bytes of
the cut links are held by the proxy, as TCP would hold them, and delivered
when the partition ends. Ends with the history checker."""

import time

from scenario import Commits, Federation, arguments, link_name, mlp_job, run

args = arguments(__doc__, repeat=2, partition_seconds=8.0, resume_bound=30.0, width=32, reset_mid=0)
NAME = "partition-heal"
SITES = ("site-a", "site-b", "site-c", "site-d")


def body():
    rounds = 3 + 3 * args.repeat + 2
    resumed = []
    with Federation(names=SITES, proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "10"
        fed.start()
        job = fed.write_job(mlp_job(sites=SITES, rounds=rounds, steps=20, width=args.width, min_sites=3, deadline="2s"))
        fed["site-a"].cli("submit", job)
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        for i in range(args.repeat):
            # Only the round in flight at the cut may still commit during the
            # split (its votes may all have crossed before it), whenever a
            # loaded machine gets to it; a round planned after the cut needs
            # a site of the other side and cannot.
            before = commits.poll()
            fed.proxy.partition(("site-a", "site-b"), ("site-c", "site-d"))
            cut_at = time.monotonic()
            reset_done = False
            while time.monotonic() - cut_at < args.partition_seconds:
                time.sleep(0.2)
                commits.poll()
                if args.reset_mid and not reset_done and time.monotonic() - cut_at > args.partition_seconds / 2:
                    # The cut links' connections reset mid-partition (a middlebox
                    # losing its state): what they held, ABORTs and PLANs
                    # among it, is lost, not delivered at the heal.
                    for a in ("site-a", "site-b"):
                        for b in ("site-c", "site-d"):
                            fed.proxy.call({"command": "reset", "link": link_name(a, b)})
                    reset_done = True
            during = max(commits.rounds().values())
            assert during <= before + 1, (f"partition {i + 1}: round {during} committed without min_sites "
                                          f"({before} before the cut)")
            for s in fed.sites:  # and that one with min_sites sites in it
                for r in (s.status("e2e") or {}).get("rounds", []):
                    if before < r["round"] <= during:
                        assert len(r["participants"]) >= 3, (f"partition {i + 1}: round {r['round']} committed with "
                                                             f"{r['participants']} only")
            fed.proxy.heal()
            healed_at = time.monotonic()
            commits.wait_round(during + 1, args.resume_bound, f"a commit after heal {i + 1}")
            resumed.append(time.monotonic() - healed_at)
            print(f"partition {i + 1}: no commit for {args.partition_seconds:.0f} s at round {during}; "
                  f"round {during + 1} committed {resumed[-1]:.1f} s after the heal", flush=True)
            commits.wait_round(min(during + 3, rounds), 120, "two more rounds")
        commits.finished(240)
        fed.check_history("e2e")
    return (f"{args.repeat} partition(s) of {args.partition_seconds:.0f} s, {rounds} rounds, resumed after "
            f"{', '.join(f'{r:.1f}' for r in resumed)} s (bound {args.resume_bound:.0f} s)")


run(NAME, body)
