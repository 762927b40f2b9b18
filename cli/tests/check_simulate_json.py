"""Reads `geoloco simulate --json` on stdin and fails unless every round is
there with a digest, the final anchor's eval loss is below the
initialization's, its accuracy (the job is mlp: ten classes) is above
chance, and each round's modelled exchange is 3 RTT plus its busiest site's
bytes at the link rate (argv: the link's bit/s and RTT in ms, as given to
simulate). Prints one line saying what it saw."""
import json
import sys

lines = [json.loads(l) for l in sys.stdin if l.strip()]
rounds = [l for l in lines if "round" in l and "summary" not in l]
summary = [l for l in lines if l.get("summary")]
if not summary or not rounds:
    sys.exit(f"no rounds or no summary in the output: {lines}")
s = summary[0]
if len(rounds) != s["rounds"] or any(len(r["anchor_digest"]) != 16 for r in rounds):
    sys.exit(f"rounds missing or without digests: {rounds}")
first, last = s["initial_eval_loss"], s["final_eval_loss"]
if first is None or last is None or not last < first:
    sys.exit(f"the eval loss did not fall: {first} -> {last}")
accuracy = s["final_accuracy"]
if accuracy is None or not 0.1 < accuracy <= 1 or rounds[-1]["accuracy"] != accuracy:
    sys.exit(f"the final accuracy {accuracy} is missing, not above chance, or not the last round's")
bandwidth, rtt_ms = float(sys.argv[1]), float(sys.argv[2])
for r in rounds:
    expected = 3 * rtt_ms / 1000 + max(r["bytes_sent"]) * 8 / bandwidth
    if abs(r["exchange_seconds"] - expected) > 1e-9:
        sys.exit(f"round {r['round']}: modelled exchange {r['exchange_seconds']} s, expected {expected} s "
                 f"(3 x {rtt_ms} ms + {max(r['bytes_sent'])} bytes at {bandwidth:g} bit/s)")
print(f"eval loss fell from {first:.4f} to {last:.4f} over {len(rounds)} rounds, accuracy {accuracy:.4f}; "
      f"modelled exchanges of {rounds[0]['exchange_seconds']:.3f} s match 3 RTT + the busiest site's bytes")
