"""kill -9 the coordinator mid-job and restart it: the job resumes at the
journaled round; no round is applied twice or lost (every site's rounds
are 1..N exactly once, with equal digests)."""

from federation import Federation, mlp_job

ROUNDS = 8

with Federation() as fed:
    for s in fed.sites:  # ~1 s inner phases, so there is time to act mid-job
        s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "15"
    fed.start()
    job = fed.write_job(mlp_job(rounds=ROUNDS, steps=60, width=64, every=2))
    fed["site-a"].cli("submit", job)
    a, b = fed["site-a"], fed["site-b"]
    fed.wait_for(lambda: (a.status("e2e") or {}).get("round", 0) >= 3, 120, "round 3")
    a.kill()
    journaled = b.status("e2e")["round"]
    print(f"killed the coordinator; site-b had committed {journaled} rounds")
    a.start()
    fed.wait_for(lambda: all((s.status("e2e") or {}).get("state") == "finished" for s in fed.sites), 300,
                 "the job to finish after the coordinator's restart")
    log = open(a.log_path).read()
    assert "coordinator resumes from its journal" in log, log[-3000:]
    ref = None
    for s in fed.sites:
        st = s.status("e2e")
        rounds = [r["round"] for r in st["rounds"]]
        assert st["round"] == ROUNDS, (s.name, st["round"])
        assert len(rounds) == len(set(rounds)), f"{s.name} applied a round twice: {rounds}"
        if s.name != "site-a":
            assert rounds == list(range(1, ROUNDS + 1)), f"{s.name} lost or repeated rounds: {rounds}"
        digests = {r["round"]: r["digest"] for r in st["rounds"]}
        if ref is None:
            ref = digests
        for r, d in digests.items():
            assert ref.get(r, d) == d, (s.name, r)
        print(f"{s.name}: rounds {rounds[0]}..{rounds[-1]}, final anchor {st['anchor_digest']}")
    assert len({s.status('e2e')["anchor_digest"] for s in fed.sites}) == 1
    checked = fed.check_history("e2e")
    assert "restarts: 1," in checked, checked
print("ok")
