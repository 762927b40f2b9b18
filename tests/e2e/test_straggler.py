"""A straggler under `carry`: site-c's trainer is slowed down (fault
injection: GEOLOCO_TRAIN_STEP_DELAY_MS), so rounds close without it after
the deadline; its work arrives in a later round, discounted, and its tokens
are counted in that round's aggregate. Every site, the straggler included,
holds the same anchor after every round. Then the same under `drop`: the
late work is discarded, and the log and metrics say how much."""

import urllib.request

from federation import Federation, mlp_job

ROUNDS = 8
STEPS, BATCH = 20, 32
PHASE_TOKENS = STEPS * BATCH  # mlp: one token = one image

with Federation() as fed:
    for s in fed.sites:
        s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "10"
    fed["site-c"].env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "120"  # ~2.4 s phases against ~0.2 s
    fed.start()
    job = fed.write_job(mlp_job(rounds=ROUNDS, steps=STEPS, deadline="0.5s", min_sites=2, policy="carry"))
    fed["site-a"].cli("submit", job)
    fed.wait_for(lambda: all((s.status("e2e") or {}).get("state") == "finished" for s in fed.sites), 240,
                 "the job to finish")
    a = fed["site-a"].status("e2e")
    late_rounds = [r["round"] for r in a["rounds"] if "site-c" in r["late"]]
    carried = [r for r in a["rounds"] if "site-c" in r["participants"] and r["round"] > 1]
    print("rounds:", [(r["round"], r["participants"], r["late"], r["tokens"]) for r in a["rounds"]])
    assert late_rounds, "site-c was never left out: the fault injection did not slow it down"
    assert carried, "site-c's late work never joined a round"
    for r in carried:
        assert r["tokens"] == 3 * PHASE_TOKENS, r  # its tokens are in the aggregate
    log = open(fed["site-c"].log_path).read()
    assert "late work joins round" in log, log[-2000:]
    ref = {r["round"]: r["digest"] for r in a["rounds"]}
    for s in fed.sites:
        st = s.status("e2e")
        assert [r["round"] for r in st["rounds"]] == list(range(1, ROUNDS + 1)), (s.name, st["rounds"])
        for r in st["rounds"]:
            assert r["digest"] == ref[r["round"]], (s.name, r["round"])
    print(f"site-c late in rounds {late_rounds}; its work joined rounds {[r['round'] for r in carried]}")

    fed.check_history("e2e")

    # The same straggler under `drop`.
    job = fed.write_job(mlp_job(name="e2e-drop", rounds=6, steps=STEPS, deadline="0.5s", min_sites=2,
                                policy="drop"), "drop.yaml")
    fed["site-a"].cli("submit", job)
    fed.wait_for(lambda: all((s.status("e2e-drop") or {}).get("state") == "finished" for s in fed.sites), 240,
                 "the drop job to finish")
    a = fed["site-a"].status("e2e-drop")
    print("rounds:", [(r["round"], r["participants"], r["late"]) for r in a["rounds"]])
    assert any("site-c" in r["late"] for r in a["rounds"]), a["rounds"]
    c_status = fed["site-c"].status("e2e-drop")
    assert all(r["digest"] == {x["round"]: x["digest"] for x in a["rounds"]}[r["round"]] for r in c_status["rounds"])
    log = open(fed["site-c"].log_path).read()
    assert "dropped this site's late work" in log, log[-2000:]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{fed['site-c'].metrics_port}/metrics", timeout=10).read().decode()
    dropped = [l for l in metrics.splitlines() if l.startswith('geoloco_dropped_tokens_total{job="e2e-drop"}')]
    assert dropped and float(dropped[0].split()[-1]) >= PHASE_TOKENS, dropped
    print(f"under drop, site-c's late work was discarded and counted: {dropped[0]}")
    checked = fed.check_history("e2e-drop")
    assert "(0 drops)" not in checked, checked
print("ok")
