"""docs/design.md §10's "a rejoining site's state sync runs at link speed", measured.

Two geolocod sites whose egress is capped at R bit/s (transport.rate_limit,
the stand-in for a WAN link) run an external-trainer job of P parameters (the
Python client, no compute). The second site starts without state and gets it
by STATE_SYNC from the coordinator: anchor and momentum, 8 bytes per
parameter plus frame headers. Each daemon logs the transfer it sent or
received (bytes, seconds, MB/s) and exports geoloco_state_sync_seconds; this
script reads the receiving site's log line and prints it next to the link's
bound, bytes x 8 / R. The time runs from site-b's request to the state in
place (one round trip more than the transfer itself); the sender's own
figure (its first frame to its last, through the rate cap) is printed too.

    /usr/bin/python3 bench/state_sync.py [--params N] [--rate R] [--build DIR] [--json]

R is bit/s with the suffixes geoloco takes everywhere (1G, 400M; default
1G); --rate 0 runs without a cap (loopback: no bound, the rate is printed).
"""

import argparse
import json
import os
import re
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/e2e"))
sys.path.insert(0, os.path.join(HERE, "../python"))
sys.path.insert(0, HERE)
from federation import Federation  # noqa: E402
from daemon_memory import matrix_layout, run_external_job  # noqa: E402
import numpy as np  # noqa: E402

RECEIVED = re.compile(r"state of round (\d+) received from (\S+): (\d+) parameters, (\d+) bytes in ([0-9.]+) s")
RATE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(k|K|M|G|T|Ki|Mi|Gi|Ti)?$")
SCALE = {None: 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def rate_mbit(text):
    """--rate's bit/s (common/units.h's suffixes) in Mbit/s; 0: no cap."""
    found = RATE.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"'{text}': expected bit/s with an optional suffix k, M, G, T, Ki, Mi, Gi, Ti")
    return float(found.group(1)) * SCALE[found.group(2)] / 1e6


SENT = re.compile(r"state of round (\d+) sent to site-b: (\d+) bytes in ([0-9.]+) s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=16 << 20)
    ap.add_argument("--rate", type=rate_mbit, default=1000.0, dest="rate_mbit", metavar="R")
    ap.add_argument("--build", default=os.path.join(HERE, "../build"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    layout, P = matrix_layout(args.params)

    with Federation(names=("site-a", "site-b"), build=args.build, heartbeat_timeout="30s", read_timeout="20s",
                    rate_limit=f"{args.rate_mbit:g}M" if args.rate_mbit > 0 else "0") as fed:
        fed.start()
        job = fed.write_job("""name: statesync
sites: [site-a, site-b]
coordinator: site-a
trainer: {kind: external}
inner: {steps: 1}
straggler: {deadline: 120s, min_sites: 2}
checkpoint: {every_rounds: 1000}
stop: {rounds: 1}
""")
        fed["site-a"].cli("submit", job)
        run_external_job(fed, "statesync", layout, 1, np.linspace(-1, 1, P, dtype=np.float32), threading.Event())
        found = RECEIVED.search(open(fed["site-b"].log_path).read())
        if not found:
            fed.fail("site-b's log has no 'state of round ... received' line")
        round_, source, values, nbytes, seconds = found.groups()
        sent = SENT.search(open(fed[source].log_path).read())
        if not sent:
            fed.fail(f"{source}'s log has no 'state of round ... sent to site-b' line")
        sender_seconds = float(sent.group(3))

    nbytes, seconds = int(nbytes), float(seconds)
    result = {"params": P, "rate_mbit": args.rate_mbit, "round": int(round_), "from": source, "bytes": nbytes,
              "seconds": seconds, "sender_seconds": sender_seconds, "mb_per_s": nbytes / seconds / 1e6}
    if args.rate_mbit > 0:
        result["bound_seconds"] = nbytes * 8 / (args.rate_mbit * 1e6)
        result["ratio_to_bound"] = seconds / result["bound_seconds"]
    if args.json:
        print(json.dumps(result))
        return
    cap = f"egress capped at {args.rate_mbit:g} Mbit/s" if args.rate_mbit > 0 else "no cap (loopback)"
    print(f"STATE_SYNC of {P:,} parameters (anchor + momentum) from {source} to site-b, {cap}:")
    print(f"  {nbytes:,} bytes in {seconds:.2f} s = {result['mb_per_s']:.1f} MB/s "
          f"({nbytes * 8 / seconds / 1e6:.0f} Mbit/s), request to state in place; the sender's frames took "
          f"{sender_seconds:.2f} s")
    if args.rate_mbit > 0:
        print(f"  link bound (bytes x 8 / rate): {result['bound_seconds']:.2f} s; measured / bound: "
              f"{result['ratio_to_bound']:.3f}  (docs/design.md §10: at link speed)")


if __name__ == "__main__":
    main()
