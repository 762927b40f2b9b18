"""End to end: three real daemons, each site's trainer a PyTorch loop
through geoloco.torch (examples/torch_fashion_mnist.py), attached as an
external trainer. A plain DiLoCo job, a Streaming DiLoCo job (2
fragments, overlap 5, alpha 0.5), and a plain job of examples/torch_ddp_gpt.py
with every site a torchrun group (DDP, 2 CPU processes): every round committed by all three sites
with one anchor digest, the training loss falls, each trainer ends holding
the committed final anchor bit for bit (every rank's saved parameters against the
daemon's checkpoint), and the trainer's timing reaches geoloco status. A
model of another layout and a missing daemon are refused with their reason.
The failure cases (a daemon restarted, a killed rank, a cancelled job) are
test_torch_faults.py's. Skipped (77) where /usr/bin/python3 has no torch."""

import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"torch and numpy are needed ({e}): skipping")
    sys.exit(77)

from federation import Federation
from torch_jobs import (GPT_EXAMPLE, fresh_model, finish, geoloco, job_text, model_tensors, load, run_job,
                        start_trainers, stop)

with Federation() as fed:
    fed.start()
    st = run_job(fed, "torch-plain", rounds=4, engine_rounds=4)
    # The checkpoint loads into a fresh model in one call; a model of another shape is refused by name.
    anchor = model_tensors(load(st["site-b"]["checkpoint"]))
    fresh = fresh_model()
    ckpt = geoloco.torch.load_checkpoint(fresh, st["site-b"]["checkpoint"])
    assert ckpt.round == 4, ckpt.round
    for tensor, p in fresh.named_parameters():
        assert np.array_equal(p.detach().numpy(), anchor[tensor]), tensor
    try:
        geoloco.torch.load_checkpoint(fresh_model(16), st["site-b"]["checkpoint"])
        raise AssertionError("a model of another layout took the checkpoint")
    except ValueError as e:
        assert "0.weight (16, 784) in the model but 0.weight (32, 784)" in str(e), e

    # Two fragments (the first Linear's weight and bias, then the second's),
    # one per round: 3 periods are 6 engine rounds, alternating fragments.
    st = run_job(fed, "torch-stream", rounds=3, engine_rounds=6,
                 extra="streaming: {fragments: 2, overlap: 5, alpha: 0.5}\n")
    fragments = [r["fragment"] for r in st["site-a"]["rounds"]]
    assert fragments == [1, 0] * 3, fragments
    # The GPT example, every site a torchrun group of 2 CPU processes (DDP,
    # gloo): rank 0 talks to the daemon, rank 1 gets each anchor by
    # broadcast. Every rank ends on the final anchor, and each SYNC counts
    # both ranks' tokens.
    two = {site.name: 2 for site in fed.sites}
    st = run_job(fed, "torch-ddp", rounds=3, engine_rounds=3, ranks=two, example=GPT_EXAMPLE,
                 args=["--layers", "2", "--width", "32", "--heads", "2", "--context", "32", "--batch", "8",
                       "--eval-windows", "64"])
    tokens = {r["round"]: r["tokens"] for r in st["site-a"]["rounds"]}
    assert all(t == 3 * 2 * 30 * 8 * 32 for t in tokens.values()), tokens  # 3 sites x 2 ranks x H x 8 windows of 32

    # A site whose model is not the job's: its loop is refused, naming the
    # difference, and exits 1; the job waits for a trainer that fits.
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-layout", 200), name="torch-layout.yaml"))
    trainers = start_trainers(fed, "torch-layout", hidden={"site-b": 16})
    try:
        out = finish(trainers[1:2], expect=1, timeout=120)["site-b"]
    finally:
        stop(trainers, show=False)  # site-a's and site-c's loops wait for a job that cannot start
    print("torch-layout: site-b's loop said:", out.strip().splitlines()[-1])
    assert "DaemonRefused" in out and "layout" in out, out
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
