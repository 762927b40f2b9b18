"""What a crash of every site costs in loss through the error-feedback
residual, which the round log does not keep: a site that rebuilt its state
by replaying the log starts again with an empty residual (docs/design.md,
"Durability"). Runs `geoloco simulate` on one job twice, the trainers and
data alike: once as it is, once with every site's residual emptied after
every `--every`-th round (a federation-wide crash that often, the worst
case: each one replayed from the log). Checks that the two runs agree bit
for bit through the first emptied round and differ after it (so the
option did what it says), and prints the final eval loss of each and the
difference.

    python3 bench/residual_cost.py --build build [--job FILE] [--rounds 40] [--every 5]
"""
import argparse
import json
import os
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--job", default=os.path.join(ROOT, "configs", "jobs", "simulate-mlp.yaml"))
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--every", type=int, default=5, help="the residuals are emptied after every N-th round")
    a = p.parse_args()
    geoloco = os.path.join(a.build, "bin", "geoloco")
    lost = list(range(a.every, a.rounds, a.every))
    if not lost:
        sys.exit(f"--every {a.every} empties no residual before round {a.rounds}")
    kept_rounds, kept = simulate(geoloco, a.job, a.rounds, [])
    lost_rounds, emptied = simulate(geoloco, a.job, a.rounds, lost)
    first = lost[0]
    same = [r["anchor_digest"] for r in kept_rounds[:first]] == [r["anchor_digest"] for r in lost_rounds[:first]]
    differs = kept_rounds[first]["anchor_digest"] != lost_rounds[first]["anchor_digest"]
    if not same or not differs:
        sys.exit(f"the runs should agree through round {first} and differ from round {first + 1}: "
                 f"same before: {same}, different after: {differs}")
    k, e = kept["final_eval_loss"], emptied["final_eval_loss"]
    print(f"{os.path.basename(a.job)}, {a.rounds} rounds, {kept['parameters']} parameters: final eval loss "
          f"{k:.5f} with the residuals kept, {e:.5f} with every site's emptied every {a.every} round(s) "
          f"({len(lost)} crashes of every site): {e - k:+.5f} ({(e - k) / k * 100:+.3f}%)")

if __name__ == "__main__":
    main()
