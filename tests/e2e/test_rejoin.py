"""Kill a non-coordinator site (daemon and trainer, kill -9) during its inner
phase: the job goes on with the other two (min_sites 2); the site restarts,
rejoins by STATE_SYNC, and its anchor digest equals the others' within one
round of its return."""

import json
import os
import re
import time

from federation import Federation, mlp_job

ROUNDS = 10

with Federation() as fed:
    for s in fed.sites:  # ~1 s inner phases, so there is time to act mid-job
        s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "15"
    fed.start()
    job = fed.write_job(mlp_job(rounds=ROUNDS, steps=60, width=64, deadline="1s"))
    fed["site-a"].cli("submit", job)
    a, c = fed["site-a"], fed["site-c"]
    # Killed once its checkpoint of its last round is on disk (checkpoints are
    # written in the background, every 2 rounds): the round log then has no
    # round to rebuild at its restart, and the record removed below must
    # come from its donors.
    found = []

    def checkpointed_round():
        r = (c.status("e2e") or {}).get("round", 0)
        if r >= 2 and f"checkpoint of round {r} saved" in open(c.log_path).read():
            found.append(r)
        return found

    fed.wait_for(checkpointed_round, 120, "site-c's checkpoint of its last round, round 2 or later")
    killed_at = found[-1]
    c.kill()  # mid-phase: the next round's inner phase started right after the commit
    print(f"killed site-c after round {killed_at}")
    # As if the kill had come after its journal learned its last round and
    # before it listed it: that round's record goes. Its disk still rebuilds
    # the round; the record comes from its donors with the state.
    round_log = os.path.join(c.dir, "data", "jobs", "e2e", "rounds.jsonl")
    with open(round_log) as f:
        lines = f.readlines()
    unlisted = json.loads(lines[-1].split(" ", 1)[1])["round"]
    assert unlisted == killed_at, f"site-c committed round {unlisted} between its checkpoint of {killed_at} and the kill"

    with open(round_log, "w") as f:
        f.writelines(lines[:-1])
    print(f"site-c's record of round {unlisted} removed from its round log")
    # The others go on without it.
    fed.wait_for(lambda: a.status("e2e")["round"] >= killed_at + 2, 120, "two rounds without site-c")
    st = a.status("e2e")
    without = [r for r in st["rounds"] if r["round"] > killed_at + 1]
    assert without and all("site-c" not in r["participants"] for r in without), without
    print(f"rounds {[r['round'] for r in without]} went on with {without[-1]['participants']}")

    c.start()
    back_at = a.status("e2e")["round"]
    print(f"site-c restarted while round {back_at} was the last committed")

    synced, first = fed.wait_for_rejoin(c, "e2e", killed_at)
    fed.wait_for(lambda: all((s.status("e2e") or {}).get("state") == "finished" for s in fed.sites), 240,
                 "the job to finish")
    ref = {r["round"]: r["digest"] for r in a.status("e2e")["rounds"]}
    for r in c.status("e2e")["rounds"]:
        assert r["digest"] == ref[r["round"]], (r["round"], r["digest"], ref[r["round"]])
    assert c.status("e2e")["anchor_digest"] == a.status("e2e")["anchor_digest"]
    # site-c lists the whole job: the rounds it missed as its donors listed
    # them (their loss and participants), saying where their state came from.
    listed = c.status("e2e")["rounds"]
    assert [r["round"] for r in listed] == list(range(1, ROUNDS + 1)), [r["round"] for r in listed]
    for r in listed:
        ours = {k: v for k, v in a.status("e2e")["rounds"][r["round"] - 1].items() if k in ("loss", "participants")}
        assert {k: r[k] for k in ours} == ours, (r, ours)
        if unlisted <= r["round"] <= synced:
            assert r.get("installed_from") in ("site-a", "site-b") and r["bytes_sent"] == 0, r
        elif r["round"] < unlisted or r["round"] > synced:
            assert "installed_from" not in r, r
    log = open(c.log_path).read()
    assert "received from site-a" in log, log[-3000:]
    # The transfer is measured and shown: its bytes (anchor and momentum,
    # 8 per parameter, plus a 48-byte header per 1 MiB frame; or, when the
    # site's own disk held an older round, only the rounds since, fewer) in
    # the log and in the metrics, with its time.
    values, nbytes, seconds, route = re.findall(
        r"state of round \d+ received from site-a: (\d+) parameters, (\d+) bytes in ([0-9.]+) s [^\n]*?"
        r"anchor [0-9a-f]+( \(as [^)]*\))?", log)[-1]
    values, nbytes = int(values), int(nbytes)
    if "of the round log, on round" in route:
        assert nbytes < 8 * values, (values, nbytes, route)
    else:
        assert nbytes == 8 * values + 2 * -(-values // (1 << 18)) * 48 or "state of round" in route, (values, nbytes)
    import urllib.request
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{c.metrics_port}/metrics", timeout=10).read().decode()
    assert f'geoloco_state_sync_bytes{{job="e2e"}} {nbytes}' in metrics, metrics
    assert re.search(r'geoloco_state_sync_seconds\{job="e2e"\} [0-9.e+-]+', metrics), metrics
    print(f"site-c rejoined by STATE_SYNC (state of round {synced}); its digests equal site-a's from round "
          f"{first} to {ROUNDS}")
    checked = fed.check_history("e2e")
    assert "restarts: 1," in checked, checked
print("ok")
