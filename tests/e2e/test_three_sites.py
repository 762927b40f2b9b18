"""End to end: 3 daemons on loopback train `mlp` for a few rounds; every
site's anchor digest is equal after every round, and the eval loss goes
down. Also checks the metrics endpoint and that `geoloco watch` streams the
rounds."""

import sys
import urllib.request

from federation import Federation, mlp_job

ROUNDS = 4

with Federation() as fed:
    fed.start()
    job = fed.write_job(mlp_job(rounds=ROUNDS, compression="[{quantize: {bits: 8}}, zstd]"))
    out = fed["site-b"].cli("submit", job).stdout  # submitted on a non-coordinator: forwarded
    print(out.strip())
    assert "site-a" in out, out

    def finished():
        states = [s.status("e2e") for s in fed.sites]
        return all(st and st["state"] == "finished" for st in states)

    fed.wait_for(finished, 240, "the job to finish on every site")
    statuses = {s.name: s.status("e2e") for s in fed.sites}
    digests = {name: {r["round"]: r["digest"] for r in st["rounds"]} for name, st in statuses.items()}
    for name, st in statuses.items():
        assert st["round"] == ROUNDS, (name, st["round"])
    for r in range(1, ROUNDS + 1):
        seen = {name: d.get(r) for name, d in digests.items()}
        assert len(set(seen.values())) == 1 and None not in seen.values(), f"round {r}: digests differ: {seen}"
        print(f"round {r}: every site's anchor is {seen['site-a']}")
    finals = {st["anchor_digest"] for st in statuses.values()}
    assert len(finals) == 1, finals

    # Eval loss of the anchors, from the coordinator's trainer log: first vs last.
    a = statuses["site-a"]
    evals = [r["eval_loss"] for r in a["rounds"] if r["eval_loss"] is not None]
    final_eval = a["eval_loss"]
    print(f"eval loss: round 1 anchor {evals[0]:.4f}, final anchor {final_eval:.4f}")
    assert final_eval < evals[0] - 0.1, (evals, final_eval)
    for r in a["rounds"]:
        assert r["bytes_sent"] > 0 and r["compression_ratio"] > 2.0, r  # q8 + zstd: > 2x smaller than fp32
        # The trainer's own clock, carried by its SYNC: steps are part of its loop.
        assert 0 < r["trainer_compute_seconds"] <= r["trainer_loop_seconds"], r
        assert r["compute_share"] == r["trainer_compute_seconds"] / r["trainer_loop_seconds"], r
    assert 0 < a["compute_share"] <= 1, a["compute_share"]

    # What each round cost each site, as its daemon counted it (round_costs.h):
    # the averaged Δ decoded twice (for the digest and for the step: only
    # headers are checked on arrival, and no clip means no pass for the
    # norm), this site's contribution encoded once (through the residual,
    # which the encode updates).
    for name, st in statuses.items():
        for r in st["rounds"]:
            c = r["costs"]
            assert c["decodes_per_chunk"] == 2.0 and c["encodes_per_chunk"] == 1.0, (name, r["round"], c)
            assert c["values"] > 0 and c["cpu_seconds"]["total"] > 0, (name, c)
            assert all(v >= 0 for v in c["cpu_seconds"].values()), (name, c)
            assert c["cpu_seconds"]["encode"] > 0 and c["cpu_seconds"]["outer_step"] > 0, (name, c)
    print(f"site-a's trainer computed {100 * a['compute_share']:.1f}% of its loop")

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{fed['site-a'].metrics_port}/metrics", timeout=10).read().decode()
    assert f'geoloco_rounds_total{{job="e2e"}} {ROUNDS}' in metrics, metrics
    assert 'geoloco_peer_sent_bytes_total{peer="site-b"}' in metrics, metrics
    assert 'geoloco_compute_share{job="e2e"} ' in metrics, metrics
    assert 'geoloco_round_cpu_seconds{job="e2e",stage="encode"} ' in metrics, metrics
    assert 'geoloco_round_decodes_per_chunk{job="e2e"} 2\n' in metrics, metrics

    again = fed["site-a"].cli("submit", job, check=False)
    assert again.returncode == 1 and "already ran on site-a (finished)" in again.stderr, (again.returncode, again.stderr)

    checked = fed.check_history("e2e")
    assert f"rounds: {ROUNDS}\n" in checked and "lost with a killed" in checked, checked
    assert "tokens: 0 reported" not in checked, checked

    watch = fed["site-c"].cli("watch", "e2e").stdout
    lines = [l for l in watch.splitlines() if l.strip() and l.split()[0].isdigit()]
    assert len(lines) == ROUNDS, watch
    assert all(l.split()[-2].endswith("%") for l in lines), watch  # busy, before lagging's "-"
    print(watch)
print("ok")
