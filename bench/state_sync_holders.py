"""A joining site's STATE_SYNC from one holder and from several at once,
measured in the same run.

Every site's egress is capped at R bit/s (transport.rate_limit, a WAN
uplink). A federation trains a built-in MLP (the `mlp` trainer, hidden
width W); once two rounds are committed, its last site is killed and
restarted after one more round, and takes the committed state by
STATE_SYNC: it asks the coordinator, and (for a state of 4 frames or more)
the other holders, each of which sends a share. The same is done with two
sites (one holder) and with K+1 sites (K holders). The joining site logs
the transfer (bytes, seconds from its request to the state in place); this
script prints it next to the bound of one uplink, bytes x 8 / R, and of
K uplinks, bytes x 8 / (K R).

    /usr/bin/python3 bench/state_sync_holders.py [--holders K] [--rate R] [--width W] [--build DIR] [--json]
"""

import argparse
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../scripts/faults"))
sys.path.insert(0, HERE)
from scenario import Commits, Federation, mlp_job  # noqa: E402
from state_sync import rate_mbit  # noqa: E402

RECEIVED = re.compile(r"state of round (\d+) received from ([a-z, -]+?): (\d+) parameters, (\d+) bytes in ([0-9.]+) s")


def rejoin(names, width, rate, build):
    """Runs a job on `names`, restarts the last site, returns what its STATE_SYNC took."""
    with Federation(names=names, build=build, proxy=False, rate_limit=f"{rate:g}M", heartbeat_timeout="20s",
                    read_timeout="10s") as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "0"
        fed.start()
        joiner = fed.sites[-1]
        fed.sites[0].cli("submit", fed.write_job(mlp_job(sites=names, rounds=40, steps=10, width=width,
                                                         deadline="5s", min_sites=min(2, len(names) - 1))))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 300, "round 2")
        joiner.kill()
        commits.wait_round(commits.poll() + 1, 300, "a round without the joining site")
        size = len(open(joiner.log_path).read())
        joiner.start()

        def received():
            return RECEIVED.search(open(joiner.log_path).read()[size:])
        fed.wait_for(received, 300, f"{joiner.name} to take the state")
        round_, senders, params, nbytes, seconds = received().groups()
        return {"sites": len(names), "round": int(round_), "from": senders, "params": int(params),
                "bytes": int(nbytes), "seconds": float(seconds)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--holders", type=int, default=3)
    ap.add_argument("--rate", type=rate_mbit, default=100.0, dest="rate_mbit", metavar="R")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--build", default=os.environ.get("GEOLOCO_BUILD", os.path.join(HERE, "../build")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    assert args.holders >= 2 and args.rate_mbit > 0, "--holders 2 or more, and a rate cap"
    names = [f"site-{chr(ord('a') + i)}" for i in range(args.holders + 1)]
    one = rejoin(names[:1] + names[-1:], args.width, args.rate_mbit, args.build)
    many = rejoin(names, args.width, args.rate_mbit, args.build)
    for r, k in ((one, 1), (many, args.holders)):
        r["holders"] = k
        r["bound_one_seconds"] = r["bytes"] * 8 / (args.rate_mbit * 1e6)
        r["bound_all_seconds"] = r["bound_one_seconds"] / k
    if args.json:
        for r in (one, many):
            print(json.dumps(r))
        return
    print(f"STATE_SYNC of {one['params']:,} parameters ({one['bytes']:,} frame bytes), every site's egress "
          f"capped at {args.rate_mbit:g} Mbit/s:")
    for r in (one, many):
        print(f"  {r['holders']} holder(s) ({r['from']}): {r['seconds']:.2f} s, request to state in place; bound "
              f"of one uplink {r['bound_one_seconds']:.2f} s, of {r['holders']} uplinks {r['bound_all_seconds']:.2f} s"
              f" (measured / that: {r['seconds'] / r['bound_all_seconds']:.2f})")
    print(f"  speed-up from {args.holders} holders: {one['seconds'] / many['seconds']:.2f}x")


if __name__ == "__main__":
    main()
