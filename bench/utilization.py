"""Compute utilization through a real WAN model (bench/wan_runs.py): three
geolocod daemons, every pair of sites through geoloco-faultproxy at a link's
rate and RTT, train the demo's GPT with plain DiLoCo, Streaming DiLoCo with
overlap, the delayed outer step, and data parallelism through the same
daemons (the fp32 model averaged after every step: H = 1, no compression).

What is measured: each site's trainer counts the time it spends in inner
steps and the time its loop runs (evaluations left out: they are the
trainer's own work, not the network's), and logs both at every sync; the
share is steps over loop time over the steady rounds (from the third sync
on: the first ones hold the sites' start-up skew), and the lowest site's is
reported. A step is the trainer's real CPU step plus --step-ms of sleep
standing for a GPU's step, since 2 cores run all three sites, their
daemons and the proxy. The evaluations' time (every anchor is evaluated
on 512 held-out windows, on the CPU) is shown per round next to the share.
The step and the round are the slowest site's (the one the others wait
for); from its step time and the measured compression ratio `geoloco plan`
predicts the round time and the utilization next to each row (the
data-parallel row: the planner's own data-parallel baseline).

    /usr/bin/python3 bench/utilization.py [--links 1G/100,100M/100] [--step-ms 100] [--h 30]
                                          [--fragments 3] [--rounds 6] [--dp-steps 30] [--only plain,dp]
                                          [--build DIR] [--keep] [--json]
"""

import json
import os
import re
import subprocess

from wan_runs import SITES, arguments, gpt_job, run_job, wan_federation

NESTEROV = "{optimizer: nesterov, lr: 1.0, momentum: 0.5}"
STRAGGLER = "{deadline: 120s, min_sites: 3, policy: carry, decay: 0.5}"  # every round waits for every site


def cases(args):
    """(name, label, job text, H, fragments, overlap) of every case."""
    h, f = args.h, args.fragments
    inner = f"steps: {h}"
    return [
        ("plain", "DiLoCo", gpt_job("plain", inner, NESTEROV, STRAGGLER, args.rounds), h, 1, 0),
        ("streaming", f"streaming F={f}, overlap {h // f}",
         gpt_job("streaming", inner, NESTEROV, STRAGGLER, args.rounds,
                 extra=f"streaming: {{fragments: {f}, overlap: {h // f}, alpha: 0.5}}\n"), h, f, h // f),
        ("delayed", f"delayed outer step (overlap {h - 1})",
         gpt_job("delayed", inner, NESTEROV, STRAGGLER, args.rounds, extra="streaming: {merge: delayed}\n"),
         h, 1, h - 1),
        # Outer lr 1 without momentum: the anchor becomes the replicas' mean.
        ("dp", "data parallelism (fp32, every step)",
         gpt_job("dp", "steps: 1", "{optimizer: nesterov, lr: 1.0, momentum: 0.0}", STRAGGLER, args.dp_steps,
                 compression=""), 1, 1, 0),
    ]


def plan(build, params, measured, rate, rtt_ms, h, fragments, overlap):
    """geoloco plan's round time and utilization for the measured step time
    and compression ratio (H = 1: its data-parallel baseline)."""
    cmd = [os.path.join(build, "bin", "geoloco"), "plan", "--params", str(params),
           "--step-seconds", f"{measured['step_seconds']:.6f}", "--sites", str(len(SITES)), "--bandwidth", rate,
           "--rtt", f"{rtt_ms:g}", "--h", str(h), "--fragments", str(fragments), "--overlap", str(overlap),
           "--compression", f"{max(1.0, measured['compression_ratio']):.4f}", "--json"]
    p = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    figures = p["data_parallel" if h == 1 else "diloco"]
    return {"round_seconds": figures["round_seconds"], "utilization": figures["utilization"]}


def gpt_parameters(build):
    out = subprocess.run([os.path.join(build, "bin", "geoloco-train"), "--model", "gpt", "--layers", "2", "--width",
                          "128", "--heads", "4", "--context", "64", "--steps", "0"],
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"gpt, (\d+) parameters", out).group(1))


def measure(fed, name, label, text):
    run = run_job(fed, name, text)
    rounds = run["statuses"]["site-a"]["rounds"]
    trainers = run["trainers"]
    for n, t in trainers.items():
        assert t["steady_share"] is not None and t["eval_seconds"] is not None, \
            f"{name}: {n}'s trainer logged {t['syncs']} syncs and no final line: run more rounds"
    slowest = max(trainers.values(), key=lambda t: t["step_seconds"])
    ratios = [r["compression_ratio"] for r in rounds if r.get("compression_ratio")]
    return {
        "name": name, "label": label, "seconds": run["seconds"], "rounds": len(rounds),
        "share": min(t["steady_share"] for t in trainers.values()),
        "shares": {n: t["steady_share"] for n, t in trainers.items()},
        "step_seconds": slowest["step_seconds"],
        "round_seconds": slowest["sync_interval_seconds"],
        "bytes_per_round": max(r["bytes_sent"] for r in rounds),
        "compression_ratio": sum(ratios) / len(ratios) if ratios else 1.0,
        "eval_loss": run["statuses"]["site-a"]["eval_loss"],
        "eval_seconds_per_sync": max(t["eval_seconds"] / t["syncs"] for t in trainers.values()),
    }


def main():
    p = arguments(__doc__, ("plain", "streaming", "delayed", "dp"))
    p.add_argument("--links", default="1G/100,100M/100", help="RATE/RTT-ms of every link, one federation per entry")
    p.add_argument("--step-ms", type=int, default=100, help="sleep added to each inner step (GEOLOCO_TRAIN_STEP_DELAY_MS)")
    p.add_argument("--h", type=int, default=30, help="inner steps per round")
    p.add_argument("--fragments", type=int, default=3, help="Streaming DiLoCo's F")
    p.add_argument("--rounds", type=int, default=6, help="rounds (periods, streaming) per DiLoCo run")
    p.add_argument("--dp-steps", type=int, default=30, help="steps of the data-parallel run")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    params = gpt_parameters(build)
    results = []
    for spec in args.links.split(","):
        rate, rtt = spec.split("/")
        fed = wan_federation(build, rate, float(rtt), {s: args.step_ms for s in SITES}, keep=args.keep)
        with fed:
            for name, label, text, h, f, overlap in cases(args):
                if args.only and name not in args.only.split(","):
                    continue
                r = measure(fed, name, label, text)
                r.update({"link": spec, "h": h, "fragments": f, "overlap": overlap,
                          "plan": plan(build, params, r, rate, float(rtt), h, f, overlap)})
                results.append(r)
                print(f"{spec}: {label}: compute share {100 * r['share']:.1f}% (planner "
                      f"{100 * r['plan']['utilization']:.1f}%), round {r['round_seconds']:.3f} s (planner "
                      f"{r['plan']['round_seconds']:.3f} s), step {1000 * r['step_seconds']:.0f} ms, "
                      f"{r['bytes_per_round']:,} bytes per round, {r['seconds']:.0f} s", flush=True)
    if args.json:
        print(json.dumps({"params": params, "step_ms": args.step_ms, "results": results}))
        return
    print(f"\ngpt, {params:,} parameters, 3 sites; a step is the CPU's plus {args.step_ms} ms of sleep; "
          f"compute share: the lowest site's, over the steady rounds; step and round (the time between two syncs): "
          "the slowest site's")
    print("| link (rate/RTT ms) | run | compute share | planner | round s | planner | slowest step ms | bytes/round/site "
          "| compression | evaluation s/round |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['link']} | {r['label']} | {100 * r['share']:.1f}% | {100 * r['plan']['utilization']:.1f}% | "
              f"{r['round_seconds']:.3f} | {r['plan']['round_seconds']:.3f} | {1000 * r['step_seconds']:.0f} | "
              f"{r['bytes_per_round']:,} | {r['compression_ratio']:.2f}x | {r['eval_seconds_per_sync']:.2f} |")


if __name__ == "__main__":
    main()
