"""End to end: three real daemons, each site's trainer a PyTorch loop
through geoloco.torch (examples/torch_fashion_mnist.py), attached as an
external trainer. A plain DiLoCo job, a Streaming DiLoCo job (2
fragments, overlap 5, alpha 0.5), and a plain job with one site under
torchrun (DDP, 2 CPU processes): every round committed by all three sites
with one anchor digest, the training loss falls, each trainer ends holding
the committed final anchor bit for bit (every rank's saved parameters against the
daemon's checkpoint), and the trainer's timing reaches geoloco status.
Skipped (77) where /usr/bin/python3 has no torch."""

import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"torch and numpy are needed ({e}): skipping")
    sys.exit(77)

from federation import Federation, free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import geoloco.torch  # noqa: E402
from geoloco.checkpoint import load, model_tensors  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torch_fashion_mnist.py")


def job_text(name, rounds, extra=""):
    return f"""name: {name}
sites: [site-a, site-b, site-c]
coordinator: site-a
trainer: {{kind: external}}
inner: {{steps: 30}}
outer: {{optimizer: nesterov, lr: 1.0, momentum: 0.5}}
compression: [{{quantize: {{bits: 8}}}}, zstd]
straggler: {{deadline: 60s, min_sites: 3}}
checkpoint: {{every_rounds: {rounds}}}
stop: {{rounds: {rounds}}}
{extra}"""


def trainer_of(site):
    """The pid of the trainer geolocod started for `site` (its environment names the site's socket)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError):
            continue
        if EXAMPLE.encode() in cmd and any(e.startswith(b"GEOLOCO_SOCKET=" + site.dir.encode()) for e in env):
            return int(pid)
    return None


def run_job(fed, name, rounds, engine_rounds, extra="", ranks=None):
    """Runs the job with the example as every site's trainer (`ranks`: site ->
    processes under torchrun); checks the rounds, the digests, the loss, and
    that every trainer's replica (every rank's) ends on the final anchor."""
    ranks = ranks or {}
    fed["site-a"].cli("submit", fed.write_job(job_text(name, rounds, extra), name=name + ".yaml"))
    trainers = start_trainers(fed, name, ranks)
    try:
        for site, log, p in trainers:
            rc = p.wait(timeout=240)
            log.close()
            with open(log.name) as f:
                out = f.read()
            assert rc == 0, f"{site.name}'s trainer exited {rc}:\n{out}"
            print(f"{site.name}'s trainer:\n{out.strip()}")
    finally:
        for _, _, p in trainers:
            if p.poll() is None:
                p.kill()
    return check_job(fed, name, engine_rounds, ranks)


def start_trainers(fed, name, ranks, hidden=None):
    """The example as every site's external trainer of job `name`: [(site, log, process)];
    `hidden`: site -> another hidden width (a model of another layout)."""
    trainers = []
    for i, site in enumerate(fed.sites):
        sock = os.path.join(site.dir, "data", "jobs", name, "sync.sock")
        fed.wait_for(lambda: os.path.exists(sock), 30, f"{site.name}'s sync socket")
        log = open(os.path.join(fed.root, f"{name}-{site.name}-trainer.log"), "w")
        n = ranks.get(site.name, 1)
        # Debian's torchrun (torch 1.13 on Python 3.11) cannot parse its default
        # "0" for --redirects and --tee: 1 (stdout, teed) is the form it reads.
        launcher = ["/usr/bin/python3"] if n == 1 else [
            "/usr/bin/torchrun", "--nproc_per_node", str(n), "--master_port", str(free_ports(1)[0]),
            "--redirects", "1", "--tee", "1"]
        trainers.append((site, log, subprocess.Popen(
            launcher + [EXAMPLE, "--socket", sock, "--job", name, "--shard", str(i), "--shards", "3",
             "--hidden", str((hidden or {}).get(site.name, 32)), "--eval-samples", "500", "--timeout", "60",
             "--save", os.path.join(fed.root, f"{name}-{site.name}.npz")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)))
    return trainers


def check_job(fed, name, engine_rounds, ranks):
    fed.wait_for(lambda: all((s.status(name) or {}).get("state") == "finished" for s in fed.sites), 60,
                 f"job {name} to finish on every site")
    statuses = {s.name: s.status(name) for s in fed.sites}
    for site, st in statuses.items():
        assert st["round"] == engine_rounds, (site, st["round"])
    for r in range(1, engine_rounds + 1):
        seen = {site: {x["round"]: x["digest"] for x in st["rounds"]}.get(r) for site, st in statuses.items()}
        assert len(set(seen.values())) == 1 and None not in seen.values(), f"round {r}: digests differ: {seen}"
    a = statuses["site-a"]["rounds"]
    assert all(len(r["participants"]) == 3 for r in a), a
    losses = [r["loss"] for r in a]
    print(f"{name}: training loss by round {[round(x, 4) for x in losses]}")
    assert losses[-1] < losses[0] - 0.2, losses
    # The wrapper's SYNC carries its timing: the daemon shows the trainer's compute share.
    assert all(r["compute_share"] is not None and 0 < r["compute_share"] <= 1 for r in a), a
    # Every trainer ends holding the committed final anchor, bit for bit.
    for site, st in statuses.items():
        anchor = model_tensors(load(st["checkpoint"]))
        n = ranks.get(site, 1)
        files = [f"{name}-{site}.npz"] if n == 1 else [f"{name}-{site}.rank{r}.npz" for r in range(n)]
        for file in files:
            saved = np.load(os.path.join(fed.root, file))
            assert set(saved.files) == set(anchor), (saved.files, list(anchor))
            for tensor in anchor:
                assert np.array_equal(saved[tensor], anchor[tensor]), f"{file}: {tensor} differs from the final anchor"
    # The checkpoint loads into a fresh model in one call; a model of another shape is refused by name.
    fresh = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    ckpt = geoloco.torch.load_checkpoint(fresh, statuses["site-b"]["checkpoint"])
    assert ckpt.round == engine_rounds, ckpt.round
    for tensor, p in fresh.named_parameters():
        assert np.array_equal(p.detach().numpy(), anchor[tensor]), tensor
    try:
        geoloco.torch.load_checkpoint(torch.nn.Sequential(torch.nn.Linear(784, 16)), statuses["site-b"]["checkpoint"])
        raise AssertionError("a model of another layout took the checkpoint")
    except ValueError as e:
        assert "0.weight (16, 784) in the model but 0.weight (32, 784)" in str(e), e
    print(f"{name}: {engine_rounds} rounds, one digest each on 3 sites; every trainer holds the final anchor")
    return statuses


with Federation() as fed:
    fed.start()
    run_job(fed, "torch-plain", rounds=4, engine_rounds=4)
    # Two fragments (the first Linear's weight and bias, then the second's),
    # one per round: 3 periods are 6 engine rounds, alternating fragments.
    st = run_job(fed, "torch-stream", rounds=3, engine_rounds=6,
                 extra="streaming: {fragments: 2, overlap: 5, alpha: 0.5}\n")
    fragments = [r["fragment"] for r in st["site-a"]["rounds"]]
    assert fragments == [1, 0] * 3, fragments
    # Site b trains with DDP inside the site: torchrun, 2 CPU processes (gloo);
    # rank 0 talks to the daemon, rank 1 gets each anchor by broadcast. Both
    # ranks end on the final anchor, and b's SYNC counts both ranks' samples.
    st = run_job(fed, "torch-ddp", rounds=3, engine_rounds=3, ranks={"site-b": 2})
    tokens = {r["round"]: r["tokens"] for r in st["site-a"]["rounds"]}
    assert all(t == (1 + 2 + 1) * 30 * 64 for t in tokens.values()), tokens  # ranks a, b0, b1, c: H x batch 64 each

    # trainer.kind command: geolocod starts the loop itself on every site (the
    # shard from GEOLOCO_SITE_SHARD), and restarts site-c's when it is killed
    # mid-job; the restarted loop is welcomed with the committed anchor and
    # the job ends with every round of all three sites, one digest each.
    rounds = 12
    save = os.path.join(fed.root, "torch-command-{shard}.npz")
    command = ["/usr/bin/python3", EXAMPLE, "--hidden", "32", "--eval-samples", "200", "--timeout", "60",
               "--state", os.path.join(fed.root, "torch-command-state-{shard}.pt"), "--save", save]
    trainer = "trainer: {kind: command, command: [%s]}" % ", ".join(json.dumps(x) for x in command)
    fed["site-a"].cli("submit", fed.write_job(
        job_text("torch-command", rounds).replace("trainer: {kind: external}", trainer), name="torch-command.yaml"))
    c = fed["site-c"]
    fed.wait_for(lambda: (c.status("torch-command") or {}).get("round", 0) >= 2, 120, "round 2 of torch-command")
    victim = trainer_of(c)
    assert victim is not None, "site-c's trainer was not found"
    os.kill(victim, 9)
    fed.wait_for(lambda: all((s.status("torch-command") or {}).get("state") == "finished" for s in fed.sites), 240,
                 "torch-command to finish on every site")
    restarted = trainer_of(c)
    statuses = {s.name: s.status("torch-command") for s in fed.sites}
    for r in range(1, rounds + 1):
        seen = {n: {x["round"]: x["digest"] for x in st["rounds"]}.get(r) for n, st in statuses.items()}
        assert len(set(seen.values())) == 1 and None not in seen.values(), f"round {r}: digests differ: {seen}"
    assert all(len(r["participants"]) == 3 for r in statuses["site-a"]["rounds"]), statuses["site-a"]["rounds"]
    with open(os.path.join(c.dir, "data", "jobs", "torch-command", "trainer.log")) as f:
        log = f.read()
    assert log.count("start: round") == 2, log  # the first loop and its restart
    # The restart resumed its inner AdamW and its place in the data from the
    # state saved at its last sync: the round it is welcomed at, (round - 1) x H steps.
    restart = log[log.rindex("start: round"):]
    welcomed = int(restart.split("start: round ")[1].split(",")[0])
    assert f"resumed from the saved state: round {welcomed}, step {(welcomed - 1) * 30}" in restart, log
    print("site-c's trainer, killed after round 2 and restarted by geolocod:\n" + log.strip())
    anchor = model_tensors(load(statuses["site-c"]["checkpoint"]))
    saved = np.load(save.format(shard=2))
    for tensor in anchor:
        assert np.array_equal(saved[tensor], anchor[tensor]), f"the restarted trainer's {tensor} is not the anchor"
    print(f"torch-command: {rounds} rounds on 3 sites after site-c's trainer was killed (pid {victim}"
          f"{'' if restarted is None else ', still running as ' + str(restarted)})")

    # A job cancelled under running external loops: every site's loop stops
    # (exit 1) saying what happened and what to look at, not a bare socket error.
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-cancel", 200), name="torch-cancel.yaml"))
    trainers = start_trainers(fed, "torch-cancel", {})
    try:
        fed.wait_for(lambda: (fed["site-a"].status("torch-cancel") or {}).get("round", 0) >= 2, 120,
                     "round 2 of torch-cancel")
        fed["site-b"].cli("cancel", "torch-cancel")
        for site, log, p in trainers:
            rc = p.wait(timeout=120)
            log.close()
            with open(log.name) as f:
                out = f.read()
            assert rc == 1, f"{site.name}'s loop exited {rc} after the cancel:\n{out}"
            assert "the job was cancelled or has finished, or geolocod stopped" in out, out
            assert "geoloco status torch-cancel" in out, out
    finally:
        for _, _, p in trainers:
            if p.poll() is None:
                p.kill()
    print("torch-cancel: every site's loop stopped with the reason after the job was cancelled")

    # A site whose model is not the job's: its loop is refused, naming the
    # difference, and exits 1; the job waits for a trainer that fits.
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-layout", 200), name="torch-layout.yaml"))
    trainers = start_trainers(fed, "torch-layout", {}, hidden={"site-b": 16})
    try:
        site, log, p = trainers[1]
        rc = p.wait(timeout=120)
        log.close()
        with open(log.name) as f:
            out = f.read()
        assert rc == 1, f"site-b's loop with the wrong model exited {rc}:\n{out}"
        print("torch-layout: site-b's loop said:", out.strip().splitlines()[-1])
        assert "DaemonRefused" in out and "layout" in out, out
    finally:
        for _, _, p in trainers:
            if p.poll() is None:
                p.kill()
    fed["site-a"].cli("cancel", "torch-layout")

# No daemon at the socket: the wrapper says what to check.
model = torch.nn.Linear(4, 2)
try:
    geoloco.torch.DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), socket="/nonexistent/sync.sock",
                         job="nothing", connect_timeout=0.3).start()
    raise AssertionError("a wrapper without a daemon started")
except geoloco.sync_client.SyncError as e:
    assert "is geolocod running with job 'nothing' on this site" in str(e), e
    print("no daemon:", e)
print("ok")
