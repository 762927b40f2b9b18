"""What the PyTorch end-to-end tests share: a job file for three sites whose
trainers are examples/torch_fashion_mnist.py through geoloco.torch, starting
those loops as external trainers, waiting for them, and the checks every
finished job must pass (one digest per round on every site, the loss
falling, every trainer and rank ending on the final anchor)."""

import atexit
import os
import signal
import subprocess
import sys

import numpy as np
import torch

from federation import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import geoloco.torch  # noqa: E402
from geoloco.checkpoint import load, model_tensors  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torch_fashion_mnist.py")
GPT_EXAMPLE = os.path.join(ROOT, "examples", "torch_ddp_gpt.py")
# Debian's torchrun (torch 1.13 on Python 3.11) cannot parse its default "0"
# for --redirects and --tee: 1 (stdout, teed) is the form it reads. Each
# group gets a --master_port of its own: --standalone would put every site's
# group on one port (29400) and tie them to whichever agent holds it.
TORCHRUN = ["/usr/bin/torchrun", "--redirects", "1", "--tee", "1", "--monitor_interval", "1"]


def job_text(name, rounds, extra="", trainer="{kind: external}", min_sites=3):
    return f"""name: {name}
sites: [site-a, site-b, site-c]
coordinator: site-a
trainer: {trainer}
inner: {{steps: 30}}
outer: {{optimizer: nesterov, lr: 1.0, momentum: 0.5}}
compression: [{{quantize: {{bits: 8}}}}, zstd]
straggler: {{deadline: 60s, min_sites: {min_sites}}}
checkpoint: {{every_rounds: {rounds}}}
stop: {{rounds: {rounds}}}
{extra}"""


_started = []  # every trainer process group this test started, ended at exit whatever happened


@atexit.register
def _end_all():
    for p in _started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_trainers(fed, name, ranks=None, hidden=None, example=EXAMPLE, args=()):
    """`example` (the Fashion-MNIST loop by default) as every site's external
    trainer of job `name`: [(site, log, process)]; `ranks`: site -> processes
    under torchrun; `hidden`: site -> another hidden width of the MLP (a
    model of another layout); `args`: more of the example's arguments."""
    trainers = []
    for i, site in enumerate(fed.sites):
        sock = os.path.join(site.dir, "data", "jobs", name, "sync.sock")
        fed.wait_for(lambda: os.path.exists(sock), 30, f"{site.name}'s sync socket")
        log = open(os.path.join(fed.root, f"{name}-{site.name}-trainer.log"), "w")
        n = (ranks or {}).get(site.name, 1)
        launcher = ["/usr/bin/python3"] if n == 1 else TORCHRUN + [
            "--nproc_per_node", str(n), "--master_port", str(free_ports(1)[0])]
        width = str((hidden or {}).get(site.name, 32))
        mlp = ["--hidden", width, "--eval-samples", "500"] if example == EXAMPLE else []
        trainers.append((site, log, subprocess.Popen(
            launcher + [example, "--socket", sock, "--job", name, "--shard", str(i), "--shards", "3",
                        "--timeout", "60", "--save", os.path.join(fed.root, f"{name}-{site.name}.npz"), *mlp, *args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, PYTHONFAULTHANDLER="1"))))
        _started.append(trainers[-1][2])
    return trainers


def finish(trainers, expect=0, timeout=240):
    """Waits for each trainer to exit, asserts its exit status is `expect`,
    and returns {site name: its output}. A trainer still running after
    `timeout` seconds fails the test with the Python stacks of its processes
    (stop()); whatever still runs when this leaves is stopped the same way."""
    outputs = {}
    try:
        for site, log, p in trainers:
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{site.name}'s trainer still runs after {timeout} s") from None
            log.close()
            with open(log.name) as f:
                outputs[site.name] = f.read()
            assert rc == expect, f"{site.name}'s trainer exited {rc}, not {expect}:\n{outputs[site.name]}"
    finally:
        stop(trainers)
    return outputs


def stop(trainers, show=True):
    """Ends the trainers still running. Each runs with PYTHONFAULTHANDLER, so
    SIGABRT to its process group (torchrun's agent and workers too) prints
    every thread's Python stack into its log first, which `show` prints: a
    hang says where it hangs."""
    for site, log, p in trainers:
        if p.poll() is not None:
            if show and not log.closed:  # ended, and finish() did not read it: what it said may be the cause
                log.close()
                with open(log.name) as f:
                    print(f"--- {site.name}'s trainer exited {p.returncode}; its output:\n{f.read()[-6000:]}")
            continue
        try:
            os.killpg(p.pid, signal.SIGABRT)
            p.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)
        if show:
            log.close()
            with open(log.name) as f:
                print(f"--- {site.name}'s trainer, stopped while running; its output:\n{f.read()[-12000:]}")


def trainer_of(site, local_rank=None):
    """The pid of a process running the example for `site` (its environment
    names the site's socket), of torchrun's worker `local_rank` when given."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if EXAMPLE.encode() not in cmd or any(c.endswith(b"torchrun") for c in cmd):  # not torchrun's agent
            continue
        if not any(e.startswith(b"GEOLOCO_SOCKET=" + site.dir.encode()) for e in env):
            continue
        if local_rank is None or f"LOCAL_RANK={local_rank}".encode() in env:
            return int(pid)
    return None


def check_digests(fed, name, rounds):
    """Every round 1..rounds listed by every site's status, once, with one
    digest and one loss across sites; the statuses. A site whose daemon was
    started again mid-job lists the rounds from before it too."""
    statuses = {s.name: s.status(name) for s in fed.sites}
    for site, st in statuses.items():
        assert st["round"] == rounds, (site, st["round"])
        assert st["anchor_digest"] == statuses["site-a"]["anchor_digest"], (site, st["anchor_digest"])
        assert [x["round"] for x in st["rounds"]] == list(range(1, rounds + 1)), (site, [x["round"] for x in st["rounds"]])
    for r in range(1, rounds + 1):
        seen = {site: (st["rounds"][r - 1]["digest"], st["rounds"][r - 1]["loss"]) for site, st in statuses.items()}
        assert len(set(seen.values())) == 1, f"round {r}: sites differ: {seen}"
    return statuses


def check_final_anchor(fed, name, statuses, ranks=None, files=None):
    """Every trainer (every rank under torchrun) saved the final anchor, bit
    for bit, in <name>-<site>.npz (`files`: site -> another stem)."""
    for site, st in statuses.items():
        anchor = model_tensors(load(st["checkpoint"]))
        n = (ranks or {}).get(site, 1)
        stem = (files or {}).get(site, f"{name}-{site}")
        files_ = [f"{stem}.npz"] if n == 1 else [f"{stem}.rank{r}.npz" for r in range(n)]
        for file in files_:
            saved = np.load(os.path.join(fed.root, file))
            assert set(saved.files) == set(anchor), (saved.files, list(anchor))
            for tensor in anchor:
                assert np.array_equal(saved[tensor], anchor[tensor]), f"{file}: {tensor} differs from the final anchor"


def check_job(fed, name, engine_rounds, ranks=None):
    """A finished job: the digests, every round with all three sites, the
    loss falling, the trainers' timing shown, the final anchor everywhere."""
    fed.wait_for(lambda: all((s.status(name) or {}).get("state") == "finished" for s in fed.sites), 60,
                 f"job {name} to finish on every site")
    statuses = check_digests(fed, name, engine_rounds)
    a = statuses["site-a"]["rounds"]
    assert all(len(r["participants"]) == 3 for r in a), a
    losses = [r["loss"] for r in a]
    print(f"{name}: training loss by round {[round(x, 4) for x in losses]}")
    assert losses[-1] < losses[0] - 0.2, losses
    # The wrapper's SYNC carries its timing: the daemon shows the trainer's compute share.
    assert all(r["compute_share"] is not None and 0 < r["compute_share"] <= 1 for r in a), a
    check_final_anchor(fed, name, statuses, ranks)
    print(f"{name}: {engine_rounds} rounds, one digest each on 3 sites; every trainer holds the final anchor")
    return statuses


def run_job(fed, name, rounds, engine_rounds, extra="", ranks=None, example=EXAMPLE, args=()):
    """Submits the job, runs the example as every site's trainer, checks it (check_job)."""
    fed["site-a"].cli("submit", fed.write_job(job_text(name, rounds, extra), name=name + ".yaml"))
    for site, out in finish(start_trainers(fed, name, ranks, example=example, args=args)).items():
        print(f"{site}'s trainer:\n{out.strip()}")
    return check_job(fed, name, engine_rounds, ranks)


def fresh_model(hidden=32):
    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
