"""Streaming DiLoCo against plain DiLoCo under geolocod: three loopback sites
train the demo's GPT (configs/jobs/demo.yaml's model and optimizers) for the
same number of inner steps twice, once syncing the whole model every H steps
and once in F fragments (one per round, every H/F steps, overlap τ, merge α).

Prints for each run: rounds, the most bytes a site sent in one round (the
peak the WAN link must carry at once), the bytes it sent in all, the final
eval loss and the wall time; then the peak ratio plain / streaming next to
its bound F (fragments of equal size; tensors are never cut, so the largest
fragment sets the real bound, printed too from the layout in the checkpoint).

    /usr/bin/python3 bench/streaming.py [--periods 4] [--steps 16] [--fragments 4] [--overlap 2]
                                        [--alpha 0.5] [--build DIR] [--json]
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/e2e"))
sys.path.insert(0, os.path.join(HERE, "../python"))
from federation import Federation  # noqa: E402
from geoloco import checkpoint  # noqa: E402
import numpy as np  # noqa: E402


def job_text(name, periods, steps, streaming):
    return f"""name: {name}
sites: [site-a, site-b, site-c]
coordinator: site-a
seed: 1
trainer: {{kind: builtin, model: gpt, layers: 2, width: 128, heads: 4, context: 64, workers: 1}}
inner: {{optimizer: adamw, lr: 0.002, steps: {steps}, batch: 16, warmup: 20, weight_decay: 0.01, clip: 1.0}}
outer: {{optimizer: nesterov, lr: 0.7, momentum: 0.9}}
compression: [{{quantize: {{bits: 8}}}}, zstd]
straggler: {{deadline: 60s, min_sites: 3}}
{streaming}stop: {{rounds: {periods}}}
"""


def largest_fragment_share(path, fragments):
    """The cut geolocod makes (inner/protocol/layout.h split_fragments): fragment k
    ends at the first tensor boundary at or past (k+1)/F of the values."""
    layout = checkpoint.load(path).layout
    sizes = [int(np.prod(shape, dtype=np.int64)) for _, shape in layout]
    total, at, ends, t = sum(sizes), 0, [], 0
    for k in range(fragments):
        target = total * (k + 1) // fragments
        must_leave = fragments - k - 1
        begin = at
        while True:
            at += sizes[t]
            t += 1
            if not (t < len(sizes) - must_leave and at < target):
                break
        if k + 1 == fragments:
            at = total
        ends.append(at - begin)
    return max(ends) / total


def run(fed, name, text):
    start = time.monotonic()
    fed["site-a"].cli("submit", fed.write_job(text, name + ".yaml"))
    fed.wait_for(lambda: all((s.status(name) or {}).get("state") == "finished" for s in fed.sites), 1200,
                 f"job {name} to finish")
    seconds = time.monotonic() - start
    statuses = [s.status(name) for s in fed.sites]
    assert len({st["anchor_digest"] for st in statuses}) == 1, "anchors differ"
    a = statuses[0]
    sent = [r["bytes_sent"] for r in a["rounds"]]
    return {"rounds": len(sent), "peak_round_bytes": max(sent), "bytes_sent": sum(sent),
            "eval_loss": a["eval_loss"], "seconds": seconds,
            "checkpoint": os.path.join(fed["site-a"].dir, "data", "jobs", name, "checkpoint.safetensors")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--periods", type=int, default=4, help="periods of H inner steps (stop.rounds)")
    p.add_argument("--steps", type=int, default=16, help="H, inner steps per period")
    p.add_argument("--fragments", type=int, default=4)
    p.add_argument("--overlap", type=int, default=2)
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--build", default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    with Federation(build=args.build, heartbeat_timeout="30s") as fed:
        fed.start()
        plain = run(fed, "plain", job_text("plain", args.periods, args.steps, ""))
        streaming = run(fed, "streaming", job_text(
            "streaming", args.periods, args.steps,
            f"streaming: {{fragments: {args.fragments}, overlap: {args.overlap}, alpha: {args.alpha}}}\n"))
        share = largest_fragment_share(plain["checkpoint"], args.fragments)
    ratio = plain["peak_round_bytes"] / streaming["peak_round_bytes"]
    result = {"periods": args.periods, "steps": args.steps, "fragments": args.fragments, "overlap": args.overlap,
              "alpha": args.alpha, "plain": plain, "streaming": streaming, "peak_ratio": ratio,
              "peak_ratio_bound_equal_fragments": args.fragments, "peak_ratio_bound_layout": 1 / share}
    if args.json:
        print(json.dumps(result))
        return
    print(f"3 sites, demo GPT, {args.periods} periods of H = {args.steps} inner steps, q8 + zstd; site-a's figures:")
    print(f"{'run':28} {'rounds':>6} {'peak bytes/round':>17} {'bytes sent':>12} {'eval loss':>10} {'wall s':>7}")
    for label, r in ((f"plain DiLoCo", plain),
                     (f"streaming F={args.fragments} tau={args.overlap} a={args.alpha}", streaming)):
        print(f"{label:28} {r['rounds']:6} {r['peak_round_bytes']:17,} {r['bytes_sent']:12,} "
              f"{r['eval_loss']:10.4f} {r['seconds']:7.1f}")
    print(f"peak bytes per round, plain / streaming: {ratio:.2f} (bound {args.fragments} with equal fragments, "
          f"{1 / share:.2f} with this layout's largest fragment: {share:.1%} of the values)")


if __name__ == "__main__":
    main()
