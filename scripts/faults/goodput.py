"""Goodput under failures: the fraction of a fault-free run's committed
tokens that a run with a failure every N seconds commits in the same wall
time. A failure is a machine lost and rebooted: kill -9 of a random site
(the coordinator included), started again --down seconds later. Prints one
line per N and the table for docs/RELIABILITY.md.

    goodput.py --wall 120 --every 10,30,60"""

import random
import time

from scenario import Federation, arguments, mlp_job

args = arguments(__doc__, wall=120.0, every="10,30,60", down=5.0)
SITES = ("site-a", "site-b", "site-c")


def committed_tokens(fed):
    best = 0
    for s in fed.sites:
        if s.process is None or s.process.poll() is not None:
            continue
        st = s.status("e2e") or {}
        best = max(best, sum(r.get("tokens", 0) for r in st.get("rounds", [])))
    return best


def measure(every, rng):
    """Committed tokens after args.wall seconds, with a failure every `every` s (0: none)."""
    with Federation(names=SITES, proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(mlp_job(sites=SITES, rounds=100000, steps=20, deadline="2s",
                                                          min_sites=2, every=5)))
        fed.wait_for(lambda: (fed["site-a"].status("e2e") or {}).get("round", 0) >= 1, 120, "round 1")
        start = time.monotonic()
        failures = 0
        next_failure = start + every if every else float("inf")
        down = []  # (site, restart time)
        while time.monotonic() - start < args.wall:
            now = time.monotonic()
            for site, at in list(down):
                if now >= at:
                    site.start()
                    down.remove((site, at))
            if now >= next_failure:
                live = [s for s in fed.sites if all(s is not d for d, _ in down)]
                victim = rng.choice(live)
                victim.kill()
                down.append((victim, now + args.down))
                failures += 1
                next_failure += every
            time.sleep(0.1)
        tokens = committed_tokens(fed)
        if tokens == 0:  # the sites able to answer were all down at the end: ask again once they are up
            for site, _ in down:
                site.start()
            tokens = committed_tokens(fed)
        return tokens, failures


def main():
    rng = random.Random(args.seed)
    base, _ = measure(0, rng)
    print(f"fault-free: {base} tokens committed in {args.wall:.0f} s", flush=True)
    rows = []
    for every in [int(x) for x in args.every.split(",") if x]:
        tokens, failures = measure(every, rng)
        rows.append((every, failures, tokens, tokens / base if base else 0.0))
        print(f"a failure every {every} s ({failures} in {args.wall:.0f} s): {tokens} tokens, goodput "
              f"{100 * rows[-1][3]:.0f}%", flush=True)
    print()
    print(f"| failure every | failures in {args.wall:.0f} s | tokens committed | goodput |")
    print("|---|---|---|---|")
    print(f"| never | 0 | {base} | 100% |")
    for every, failures, tokens, g in rows:
        print(f"| {every} s | {failures} | {tokens} | {100 * g:.0f}% |")


main()
