"""`geoloco simulate` computes what geolocod computes: the same job file,
run once by three geolocod daemons on loopback and once by the simulator,
ends on the same anchor digest, bit for bit, after every round. Once for
plain DiLoCo (mlp, q8 + zstd with error feedback), once for Streaming
DiLoCo (3 fragments, overlap 2, alpha 0.5) and once for the delayed outer
step (merge: delayed, overlap 11 of H = 12). The job waits for every site in
every round (min_sites 3), as the simulator's fault-free federation does."""

import json
import subprocess

from federation import Federation, mlp_job

JOBS = {
    "plain": (mlp_job(name="same-plain", rounds=4, steps=20, min_sites=3, deadline="60s",
                      compression="[{quantize: {bits: 8}}, zstd]"), 4),
    "streaming": (mlp_job(name="same-stream", rounds=2, steps=12, min_sites=3, deadline="60s",
                          compression="[{quantize: {bits: 8}}, zstd]",
                          extra="streaming: {fragments: 3, overlap: 2, alpha: 0.5}\n").replace("layers: 2", "layers: 3"),
                  6),
    # The delayed outer step: each round's exchange overlaps 11 of the next
    # round's 12 steps, and the merge keeps the progress made meanwhile.
    "delayed": (mlp_job(name="same-delayed", rounds=3, steps=12, min_sites=3, deadline="60s",
                        compression="[{quantize: {bits: 8}}, zstd]", extra="streaming: {merge: delayed}\n"), 3),
}

for kind, (text, rounds) in JOBS.items():
    with Federation() as fed:
        fed.start()
        path = fed.write_job(text)
        name = [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("name:")][0]
        fed["site-a"].cli("submit", path)
        fed.wait_for(lambda: all((s.status(name) or {}).get("state") == "finished" for s in fed.sites), 300,
                     f"the {kind} job to finish on every site")
        statuses = {s.name: s.status(name) for s in fed.sites}
        federation = {r["round"]: r["digest"] for r in statuses["site-a"]["rounds"]}
        assert sorted(federation) == list(range(1, rounds + 1)), federation
        for site, st in statuses.items():
            assert {r["round"]: r["digest"] for r in st["rounds"]} == federation, (site, st["rounds"])
            assert st["anchor_digest"] == federation[rounds], (site, st["anchor_digest"])
            assert all(len(r["participants"]) == 3 for r in st["rounds"]), st["rounds"]

        out = subprocess.run([fed.geoloco, "simulate", path, "--json"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        lines = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
        simulated = {l["round"]: l["anchor_digest"] for l in lines if "round" in l and "summary" not in l}
        summary = [l for l in lines if l.get("summary")][0]
        print(f"{kind}: federation {federation}")
        print(f"{kind}: simulator  {simulated}")
        assert simulated == federation, (simulated, federation)
        assert summary["anchor_digest"] == federation[rounds]
        # The bytes each site sent, as the simulator counts them, are the daemons' too.
        sent = {r["round"]: r["bytes_sent"] for r in statuses["site-b"]["rounds"]}
        sim_b = {l["round"]: l["bytes_sent"][l["participants"].index("site-b")] for l in lines if "participants" in l}
        assert sim_b == sent, (sim_b, sent)
        print(f"{kind}: {rounds} rounds, digests and site-b's bytes equal, final anchor {summary['anchor_digest']}")
        if kind == "delayed":
            # The merge mode is what makes the difference: the same overlap with
            # the replacing merge ends elsewhere.
            replaced = fed.write_job(text.replace("streaming: {merge: delayed}", "streaming: {overlap: 11}"),
                                     name="replaced.yaml")
            out = subprocess.run([fed.geoloco, "simulate", replaced, "--json"], capture_output=True, text=True,
                                 timeout=300)
            assert out.returncode == 0, out.stderr
            other = [json.loads(l) for l in out.stdout.splitlines() if l.strip() and '"summary"' in l][0]
            assert other["anchor_digest"] != summary["anchor_digest"], other
            print(f"delayed: the replacing merge with the same overlap ends on {other['anchor_digest']}")
print("ok")
