"""What a crash of every site costs in loss through the error-feedback
residual, which the round log does not keep: a site that rebuilt its state
by replaying the log starts again with an empty residual (docs/design.md,
"Durability"). Runs `geoloco simulate` on one job, trainers and data alike:
once as it is; once with every site's residual emptied after every
`--every` rounds (a federation-wide crash that often); and once per round
of `--single` with one such crash after that round alone. Each run must
agree with the first bit for bit through its first emptied round and
differ after it (so the option did what it says). A loss is the mean eval
loss of the last `--tail` rounds; any change to one round's rounding moves
the trajectory, so the single crashes give the spread that such a change
causes and their mean the systematic cost.

    python3 bench/residual_cost.py --build build [--job FILE] [--rounds 40] [--every 5] [--single 1,5,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def simulate(geoloco, job, rounds, lost):
    cmd = [geoloco, "simulate", job, "--rounds", str(rounds), "--json"]
    if lost:
        cmd += ["--lose-residual-after", ",".join(str(r) for r in lost)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    return [l for l in lines if not l.get("summary")], next(l for l in lines if l.get("summary"))


def tail_loss(rounds, tail):
    losses = [r["eval_loss"] for r in rounds[-tail:]]
    if any(l is None for l in losses):
        sys.exit("the job logs no eval loss for every round; give a job whose trainer evaluates each anchor")
    return sum(losses) / len(losses)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--job", default=os.path.join(ROOT, "configs", "jobs", "simulate-mlp.yaml"))
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--every", type=int, default=5, help="one run with the residuals emptied every N rounds")
    p.add_argument("--single", default="", help="rounds, comma-separated, after each of which one run empties them "
                                                "once (default: every 4th round)")
    p.add_argument("--tail", type=int, default=10, help="rounds whose mean eval loss is a run's loss")
    a = p.parse_args()
    geoloco = os.path.join(a.build, "bin", "geoloco")
    every = list(range(a.every, a.rounds, a.every))
    single = [int(x) for x in a.single.split(",") if x] if a.single else list(range(1, a.rounds, 4))
    if not every or not single or any(not 1 <= r < a.rounds for r in single):
        sys.exit(f"--every and --single must name rounds 1..{a.rounds - 1}")
    tail = min(a.tail, a.rounds)
    kept_rounds, kept = simulate(geoloco, a.job, a.rounds, [])
    base = tail_loss(kept_rounds, tail)

    def run(lost):
        rounds, _ = simulate(geoloco, a.job, a.rounds, lost)
        first = lost[0]
        same = [r["anchor_digest"] for r in kept_rounds[:first]] == [r["anchor_digest"] for r in rounds[:first]]
        if not same or kept_rounds[first]["anchor_digest"] == rounds[first]["anchor_digest"]:
            sys.exit(f"emptied after round {first}: the run should agree with the first through round {first} and "
                     f"differ from round {first + 1} (same before: {same})")
        return tail_loss(rounds, tail) - base

    periodic = run(every)
    singles = [run([r]) for r in single]
    mean = statistics.mean(singles)
    sd = statistics.stdev(singles) if len(singles) > 1 else 0.0
    print(f"{os.path.basename(a.job)}, {a.rounds} rounds, {kept['parameters']} parameters; eval loss over the last "
          f"{tail} rounds {base:.5f} with the residuals kept")
    for r, d in zip(single, singles):
        print(f"  one crash of every site after round {r:3}: {d:+.5f} ({d / base * 100:+.2f}%)")
    print(f"one crash of every site: {mean:+.5f} ({mean / base * 100:+.2f}%) on average over {len(singles)} runs, "
          f"spread (sd) {sd:.5f}")
    print(f"with every site's emptied every {a.every} round(s) ({len(every)} crashes of every site): "
          f"{periodic:+.5f} ({periodic / base * 100:+.2f}%)")


if __name__ == "__main__":
    main()
