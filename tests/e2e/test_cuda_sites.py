"""End to end with CUDA trainers, on the CUDA emulator: 2 daemons whose site
files name 2 GPUs each (`gpus: [0, 1]`) run the job's built-in trainer as
geolocod does on a GPU site: `geoloco-train --backend cuda --workers 2`
with CUDA_VISIBLE_DEVICES=0,1, two worker processes in an NCCL group.
The trainer is the emulated build (build/tests/geoloco-train-emulated,
GEOLOCO_CUDA_EMULATOR_DEVICES=2), so this runs without a GPU. Checked:
the job finishes, every round's anchor is equal on both sites, the eval
loss goes down, and each site's trainer log names the NCCL group on 2
devices."""

import glob
import os

from federation import Federation, mlp_job

ROUNDS = 3

with Federation(names=("site-a", "site-b"), trainer=os.path.join("tests", "geoloco-train-emulated"),
                site_extra="gpus: [0, 1]") as fed:
    for s in fed.sites:
        s.env["GEOLOCO_CUDA_EMULATOR_DEVICES"] = "2"
    fed.start()
    job = fed.write_job(mlp_job(sites=("site-a", "site-b"), rounds=ROUNDS, steps=10, width=16))
    print(fed["site-a"].cli("submit", job).stdout.strip())

    def finished():
        states = [s.status("e2e") for s in fed.sites]
        return all(st and st["state"] == "finished" for st in states)

    fed.wait_for(finished, 300, "the job to finish on both sites")
    statuses = {s.name: s.status("e2e") for s in fed.sites}
    for r in range(1, ROUNDS + 1):
        seen = {name: {x["round"]: x["digest"] for x in st["rounds"]}.get(r) for name, st in statuses.items()}
        assert len(set(seen.values())) == 1 and None not in seen.values(), f"round {r}: digests differ: {seen}"
        print(f"round {r}: both sites' anchor is {seen['site-a']}")
    a = statuses["site-a"]
    evals = [r["eval_loss"] for r in a["rounds"] if r["eval_loss"] is not None]
    print(f"eval loss: round 1 anchor {evals[0]:.4f}, final anchor {a['eval_loss']:.4f}")
    assert a["eval_loss"] < evals[0], (evals, a["eval_loss"])

    for s in fed.sites:
        logs = glob.glob(os.path.join(s.dir, "data", "jobs", "e2e", "trainer.log"))
        assert logs, f"{s.name}: no trainer log under {s.dir}/data/jobs/e2e"
        text = open(logs[0]).read()
        banner = "2 worker(s) [nccl, launcher geoloco], cuda backend, device 0 of 2 (geoloco CUDA emulator"
        assert banner in text, f"{s.name}: the trainer log does not name the NCCL group on 2 devices:\n{text[:2000]}"
        print(f"{s.name}: {banner}")
print("ok")
