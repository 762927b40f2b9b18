"""A site three times slower than the others, through a real WAN model
(bench/wan_runs.py): three geolocod daemons, every pair of sites through
geoloco-faultproxy (1 Gbit/s, 100 ms RTT unless --link says otherwise),
train the demo's GPT for the same number of rounds in five ways:

  - no slow site (the reference);
  - site-c slow, every round waits for it (min_sites 3, a long deadline);
  - site-c slow under `carry`: a round closes `--deadline` after the
    second site is ready, and site-c's late work joins a later round,
    weighted by decay^(rounds late);
  - the same under `drop`: its late work is thrown away (and counted);
  - site-c slow with time-based phases (inner.duration): every site trains
    for the same seconds, site-c takes fewer steps, and the average weighs
    each site by the tokens it trained on.

A step is the trainer's real CPU step plus GEOLOCO_TRAIN_STEP_DELAY_MS of
sleep: --step-ms on site-a and site-b, --slow-ms on site-c (chosen so that
site-c's step is about 3x theirs; the table shows the measured steps).
Prints per run: wall-clock, rounds, tokens committed, the rounds site-c
contributed to and those that closed without it, the tokens of late work
dropped, the steps each site took, and the final eval loss of the anchor.

    /usr/bin/python3 bench/slow_site.py [--link 1G/100] [--step-ms 100] [--slow-ms 480] [--h 30]
                                        [--rounds 8] [--deadline 1s] [--only wait,carry] [--build DIR]
                                        [--keep] [--json]
"""

import json
import os

from wan_runs import SITES, arguments, gpt_job, run_job, wan_federation

NESTEROV = "{optimizer: nesterov, lr: 1.0, momentum: 0.5}"


def cases(args):
    """(name, label, slow?, job text) of every run."""
    h, wait = args.h, "{deadline: 600s, min_sites: 3, policy: carry, decay: 0.5}"
    late = lambda policy: f"{{deadline: {args.deadline}, min_sites: 2, policy: {policy}, decay: 0.5}}"  # noqa: E731
    # Time-based: as long as H of the fast sites' steps.
    duration = f"duration: {args.duration}s, min_steps: 1"
    return [
        ("equal", "no slow site", False, gpt_job("equal", f"steps: {h}", NESTEROV, wait, args.rounds)),
        ("wait", "site-c 3x slower, rounds wait for it", True, gpt_job("wait", f"steps: {h}", NESTEROV, wait,
                                                                        args.rounds)),
        ("carry", f"site-c 3x slower, carry (deadline {args.deadline})", True,
         gpt_job("carry", f"steps: {h}", NESTEROV, late("carry"), args.rounds)),
        ("drop", f"site-c 3x slower, drop (deadline {args.deadline})", True,
         gpt_job("drop", f"steps: {h}", NESTEROV, late("drop"), args.rounds)),
        ("timed", f"site-c 3x slower, time-based phases ({args.duration:g} s)", True,
         gpt_job("timed", duration, NESTEROV, wait, args.rounds)),
    ]


def contributions(status, site):
    """The rounds site contributed to (its work on time, or carried late),
    and those that closed without it (it observed them)."""
    on_time = late = 0
    for r in status["rounds"]:
        if site in r.get("participants", []):
            on_time += 1
        if site in r.get("late", []):
            late += 1
    return on_time, late


def main():
    p = arguments(__doc__, ("equal", "wait", "carry", "drop", "timed"))
    p.add_argument("--link", default="1G/100", help="RATE/RTT-ms of every link")
    p.add_argument("--step-ms", type=int, default=100, help="sleep added to each step of site-a and site-b")
    p.add_argument("--slow-ms", type=int, default=480, help="sleep added to each step of site-c")
    p.add_argument("--h", type=int, default=30, help="inner steps per round (the step-based runs)")
    p.add_argument("--duration", type=float, default=6.0, help="seconds per round (the time-based run)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--deadline", default="1s", help="straggler.deadline of the carry and drop runs")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    rate, rtt = args.link.split("/")
    results = []
    for name, label, slow, text in cases(args):
        if args.only and name not in args.only.split(","):
            continue
        delays = {s: args.step_ms for s in SITES}
        if slow:
            delays["site-c"] = args.slow_ms
        # A federation per run: a slow trainer left over from one run never
        # competes with the next for the 2 cores.
        with wan_federation(build, rate, float(rtt), delays, keep=args.keep) as fed:
            run = run_job(fed, name, text)
            dropped = sum(v for s in fed.sites for (metric, labels), v in s.metrics().items()
                          if metric == "geoloco_dropped_tokens_total" and ("job", name) in labels)
        a = run["statuses"]["site-a"]
        on_time, late = contributions(a, "site-c")
        r = {
            "name": name, "label": label, "seconds": run["seconds"], "rounds": len(a["rounds"]),
            "tokens": sum(x.get("tokens", 0) for x in a["rounds"]),
            "site_c_joined": on_time, "site_c_missed": late,
            "dropped_tokens": int(dropped),
            "steps": {n: t["steps"] for n, t in run["trainers"].items()},
            "step_ms": {n: 1000 * t["step_seconds"] if t["step_seconds"] else None
                        for n, t in run["trainers"].items()},
            "eval_loss": a["eval_loss"],
        }
        results.append(r)
        print(f"{label}: {r['seconds']:.0f} s, {r['rounds']} rounds, {r['tokens']:,} tokens, site-c joined "
              f"{on_time} rounds, missed {late}, dropped tokens {r['dropped_tokens']:,}, steps {r['steps']}, eval loss "
              f"{r['eval_loss']:.4f}", flush=True)
    if args.json:
        print(json.dumps({"link": args.link, "results": results}))
        return
    print(f"\ngpt, 3 sites over {args.link} (rate/RTT ms); a step is the CPU's plus {args.step_ms} ms of sleep "
          f"(site-c: {args.slow_ms} ms); {args.rounds} rounds each")
    print("| run | wall-clock s | tokens committed | rounds site-c joined / missed | dropped tokens | steps a / b / c "
          "| step ms a / c | eval loss |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        s, ms = r["steps"], r["step_ms"]
        print(f"| {r['label']} | {r['seconds']:.0f} | {r['tokens']:,} | {r['site_c_joined']} / {r['site_c_missed']} | "
              f"{r['dropped_tokens']:,} | {s['site-a']} / {s['site-b']} / {s['site-c']} | "
              f"{ms['site-a']:.0f} / {ms['site-c']:.0f} | {r['eval_loss']:.4f} |")


if __name__ == "__main__":
    main()
