"""Faults under Streaming DiLoCo (3 fragments, one per round): kill -9 a
non-coordinator mid-job, then the coordinator, and restart each. The job
goes on without the dead site, the site rejoins by STATE_SYNC, the restarted
coordinator resumes from its journal, and in the end every site holds the
same anchor after every round it applied, with no round applied twice and
none lost on the sites that never died."""


from federation import Federation, mlp_job

PERIODS, FRAGMENTS = 6, 3
ROUNDS = PERIODS * FRAGMENTS

with Federation() as fed:
    for s in fed.sites:  # ~0.3 s rounds (20-step phases), so there is time to act mid-job
        s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "15"
    fed.start()
    text = mlp_job(rounds=PERIODS, steps=60, width=64, deadline="1s", every=1,
                   extra=f"streaming: {{fragments: {FRAGMENTS}, overlap: 2, alpha: 0.5}}\n")
    fed["site-a"].cli("submit", fed.write_job(text.replace("layers: 2", "layers: 3")))
    a, b, c = fed["site-a"], fed["site-b"], fed["site-c"]

    # A non-coordinator dies and comes back.
    fed.wait_for(lambda: (a.status("e2e") or {}).get("round", 0) >= 2, 120, "round 2")
    killed_at = a.status("e2e")["round"]
    c.kill()
    print(f"killed site-c after round {killed_at}")
    fed.wait_for(lambda: a.status("e2e")["round"] >= killed_at + 3, 120, "three rounds without site-c")
    without = [r for r in a.status("e2e")["rounds"] if r["round"] > killed_at + 1]
    assert without and all("site-c" not in r["participants"] for r in without), without
    c.start()
    synced, first = fed.wait_for_rejoin(c, "e2e", killed_at)
    print(f"site-c rejoined by STATE_SYNC (round {synced}) and applies rounds from {first}")

    # The coordinator dies and comes back.
    fed.wait_for(lambda: a.status("e2e")["round"] >= first + 2, 120, "two more rounds")
    a.kill()
    print(f"killed the coordinator; site-b had committed {b.status('e2e')['round']} rounds")
    a.start()
    fed.wait_for(lambda: all((s.status("e2e") or {}).get("state") == "finished" for s in fed.sites), 300,
                 "the job to finish after both restarts")
    assert "coordinator resumes from its journal" in open(a.log_path).read()

    ref = {r["round"]: r["digest"] for r in b.status("e2e")["rounds"]}
    assert sorted(ref) == list(range(1, ROUNDS + 1)), f"site-b lost or repeated rounds: {sorted(ref)}"
    for s in fed.sites:
        st = s.status("e2e")
        rounds = [r["round"] for r in st["rounds"]]
        assert st["round"] == ROUNDS, (s.name, st["round"])
        assert len(rounds) == len(set(rounds)), f"{s.name} applied a round twice: {rounds}"
        for r in st["rounds"]:
            assert r["digest"] == ref[r["round"]], (s.name, r["round"])
            assert r["fragment"] == r["round"] % FRAGMENTS, r
    assert len({s.status("e2e")["anchor_digest"] for s in fed.sites}) == 1
    print(f"every site ends at round {ROUNDS} with anchor {b.status('e2e')['anchor_digest']}")
    checked = fed.check_history("e2e")
    assert "restarts: 2," in checked, checked
print("ok")
