"""The daemons' DiLoCo arithmetic against an independent reference, bit for
bit. Three sites run a job with external trainers (the sync protocol's
Python client) whose inner phase is a seeded random walk; every trainer
records, for each phase, the anchor it started from and the replica it
sent. site-c's trainer is slow in some phases, so rounds close without it
and its late work joins a later round (`policy: carry`), or is dropped
(`policy: drop`, a second job).

From those records alone, numpy recomputes every committed round as DiLoCo
defines it: each contribution's pseudo-gradient is the anchor its phase
started from minus its replica (for late work: the anchor of the round it
was trained for, not the one current when it arrived); the weights are its
tokens times decay^(rounds late), normalized in double and rounded once to
fp32; the average is summed in participant order in fp32; the outer step
is Nesterov in fp32 (momentum m = mu*m + d, anchor a = a - lr*(d + mu*m)).
Which sites took part in which round is read from the history (the
deadline decides it); the weights, the pseudo-gradients and the anchors
are the reference's own. Every anchor a trainer was given, and the final
one, must equal the reference's bit for bit; the history's weights must
equal the reference's.

With raw fp32 exchange (no compression) every step is exact in fp32, so
the comparison is exact: a wrong base for late work, a weight off by a
decay, a sum in another order or a contracted multiply-add all show."""

import json
import os
import sys
import threading
import time

import numpy as np

from federation import Federation

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../python"))
from geoloco import sync_client  # noqa: E402

VALUES = 4096
TOKENS = 1000
LR, MOMENTUM, DECAY = 0.7, 0.9, 0.5
SLOW = {3, 5}  # site-c's phases (counted from 1) that outlast the deadline


def job_text(name, policy, rounds):
    return f"""name: {name}
sites: [site-a, site-b, site-c]
coordinator: site-a
seed: 11
trainer: {{kind: external}}
inner: {{steps: 1}}
outer: {{optimizer: nesterov, lr: {LR}, momentum: {MOMENTUM}}}
straggler: {{deadline: 0.6s, min_sites: 2, policy: {policy}, decay: {DECAY}}}
checkpoint: {{every_rounds: 1000}}
stop: {{rounds: {rounds}}}
"""


def walk(site, r):
    """The phase's move of the replica: seeded by site and round, a few
    hundredths per value, so that rounds differ and late work matters."""
    rng = np.random.default_rng([7, site, r])
    return ((rng.random(VALUES, dtype=np.float32) - np.float32(0.5)) * np.float32(0.04)).astype(np.float32)


def trainer(sock, job, site, slow, records, errors):
    """One site's trainer: records {round: (anchor it started from, replica sent)} and the final anchor."""
    try:
        layout = sync_client.layout_of([("w", (VALUES // 1024, 1024))])
        c = sync_client.SyncClient.connect(sock, job, layout, connect_timeout=60, welcome_timeout=120)
        if not c.anchor_ready:
            rng = np.random.default_rng([7, 1 << 20])
            c.params[:] = rng.random(VALUES, dtype=np.float32) - np.float32(0.5)
            c.send_initial(timeout=120)
        phase = 0
        while not c.stopped:
            phase += 1
            r = c.next_round(0)
            assert r not in records, f"round {r} trained twice"  # each phase its own round
            start = c.params.copy()
            replica = (start + walk(site, r)).astype(np.float32)
            c.params[:] = replica
            time.sleep(2.5 if phase in slow else 0.05)
            c.sync(r, 0, TOKENS, 1.0)
            c.wait_result(timeout=120)
            records[r] = (start, replica)
        records["final"] = c.params.copy()
        c.close()
    except Exception as e:  # reported by the main thread
        errors.append(f"{job} site {site}: {e!r}")


def committed_events(fed, job):
    with open(os.path.join(fed["site-a"].dir, "data", "jobs", job, "history.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    return [e for e in events if e["event"] == "committed"]


def run_job(fed, name, policy, rounds):
    job = fed.write_job(job_text(name, policy, rounds), f"{name}.yaml")
    fed["site-a"].cli("submit", job)
    records = {s.name: {} for s in fed.sites}
    errors, threads = [], []
    for i, s in enumerate(fed.sites):
        sock = os.path.join(s.dir, "data", "jobs", name, "sync.sock")
        slow = SLOW if s.name == "site-c" else set()
        t = threading.Thread(target=trainer, args=(sock, name, i, slow, records[s.name], errors), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a trainer did not finish"
    fed.wait_for(lambda: all((s.status(name) or {}).get("state") == "finished" for s in fed.sites), 120,
                 f"{name} to finish")
    return records, committed_events(fed, name)


def reference(records, commits, policy):
    """Steps the anchor through every committed round from the trainers'
    records; returns the number of late contributions it checked."""
    names = sorted(records)
    anchor = records["site-a"][1][0].copy()  # round 1's start: the initial anchor
    for n in names:
        assert np.array_equal(records[n][1][0], anchor), f"{n} started round 1 from another anchor"
    momentum = np.zeros(VALUES, dtype=np.float32)
    mu, lr = np.float32(MOMENTUM), np.float32(LR)
    anchors = {0: anchor.copy()}
    late = 0
    for c in commits:
        R = c["round"]
        assert c["participants"] == [x["site"] for x in c["contributions"]], c
        weights = []
        for x in c["contributions"]:
            k = R - x["anchor_round"]
            assert k >= 0, c
            if k > 0:
                assert policy == "carry", f"round {R} counts late work under {policy}: {c}"
                late += 1
            weights.append(float(x["tokens"]) * DECAY ** k)
            assert x["tokens"] == TOKENS, c
            assert x["weight"] == weights[-1], (R, x, weights[-1])
        total = 0.0
        for w in weights:
            total += w
        shares = [np.float32(w / total) for w in weights]
        avg = np.zeros(VALUES, dtype=np.float32)
        for x, share in zip(c["contributions"], shares):
            start, replica = records[x["site"]][x["anchor_round"]]
            base = anchors[x["anchor_round"] - 1]
            # What the trainer was given for that phase is the anchor of the round before it.
            assert np.array_equal(start, base), f"{x['site']} trained round {x['anchor_round']} from another anchor"
            delta = (base - replica).astype(np.float32)
            avg = (avg + share * delta).astype(np.float32)
        momentum = (mu * momentum + avg).astype(np.float32)
        anchor = (anchor - lr * (avg + mu * momentum)).astype(np.float32)
        anchors[R] = anchor.copy()
        # Every phase that started after round R committed started from the reference's anchor R.
        for n in names:
            if R + 1 in records[n] and R + 1 <= commits[-1]["round"]:
                got = records[n][R + 1][0]
                if not np.array_equal(got, anchor):
                    bad = int(np.flatnonzero(got != anchor)[0])
                    raise AssertionError(f"after round {R}, {n} was given an anchor that is not the reference's: "
                                         f"value {bad} is {got[bad]!r}, the reference's {anchor[bad]!r}")
    for n in names:
        assert np.array_equal(records[n]["final"], anchor), f"{n} ended on an anchor that is not the reference's"
    return late


with Federation() as fed:
    fed.start()
    records, commits = run_job(fed, "carry", "carry", 12)
    assert [c["round"] for c in commits] == list(range(1, 13)), [c["round"] for c in commits]
    late = reference(records, commits, "carry")
    print(f"carry: {len(commits)} rounds equal the reference bit for bit; {late} late contributions checked")
    assert late >= 2, f"site-c's late work joined only {late} rounds: the slow phases did not make it late"
    fed.check_history("carry")

    records, commits = run_job(fed, "drop", "drop", 10)
    late = reference(records, commits, "drop")
    left_out = [c["round"] for c in commits if "site-c" not in c["participants"]]
    print(f"drop: {len(commits)} rounds equal the reference bit for bit; site-c left out of rounds {left_out}")
    assert left_out, "site-c was never left out under drop"
    fed.check_history("drop")
print("ok")
