"""End to end, PyTorch loops through geoloco.torch (examples/
torch_fashion_mnist.py) on three real daemons, under failures:

- site-c's daemon killed (kill -9) mid-job and started again, then site-b's
  stopped (SIGTERM) and started again: each loop (site-c's a torchrun group
  of 2 processes), an external trainer its daemon did not start, waits for it, is welcomed at the committed anchor
  and goes on; every round ends with all three sites and one digest, and
  every loop ends on the final anchor; then site-c's daemon killed under a
  Streaming DiLoCo job (2 fragments, τ 5, α 0.5);
- trainer kind command: geolocod starts every site's loop itself, site-c's
  under torchrun (DDP, 2 CPU processes); one of its ranks is killed, torchrun
  ends the group, geolocod starts it again, and it resumes its saved state
  (inner AdamW, data position) at the round it is welcomed at;
- a job cancelled under running loops: each stops (exit 1) saying the job
  was cancelled, at once, without waiting for a daemon that will not serve
  it again.
Skipped (77) where /usr/bin/python3 has no torch."""

import json
import os
import shlex
import signal
import sys
import time

try:
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
except ImportError as e:
    print(f"torch and numpy are needed ({e}): skipping")
    sys.exit(77)

from federation import Federation, free_ports
from torch_jobs import (EXAMPLE, TORCHRUN, check_digests, check_final_anchor, check_job, finish, job_text,
                        start_trainers, stop, trainer_of)

with Federation() as fed:
    fed.start()
    a, b, c = fed["site-a"], fed["site-b"], fed["site-c"]

    # --- site-c's daemon killed and site-b's stopped under their running loops ---
    rounds = 20
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-restart", rounds), name="torch-restart.yaml"))
    # Site-c's loop is a torchrun group of 2 processes: its rank 0 rejoins, rank 1 follows by broadcast.
    trainers = start_trainers(fed, "torch-restart", ranks={"site-c": 2})
    try:
        fed.wait_for(lambda: (c.status("torch-restart") or {}).get("round", 0) >= 2, 120, "round 2 on site-c")
        c.kill()  # kill -9, the daemon alone: the loop runs in a session of its own
        killed_at = a.status("torch-restart")["round"]
        time.sleep(1.0)
        c.start()
        # Then site-b's daemon stopped as systemd stops it (SIGTERM): the job's
        # status.json says "stopped", which a loop waits through.
        fed.wait_for(lambda: a.status("torch-restart")["round"] >= killed_at + 2, 120, "rounds after site-c's return")
        b.kill(signal.SIGTERM)
        stopped_at = a.status("torch-restart")["round"]
        assert stopped_at < rounds, "the job ended before site-b was stopped"
        time.sleep(1.0)
        b.start()
        out = finish(trainers)
    finally:
        stop(trainers)
    for site, lost_at in (("site-c", killed_at), ("site-b", stopped_at)):
        assert out[site].count("lost geolocod") == 1, out[site]
        back = out[site].split("geolocod is back; welcomed at round ")
        assert len(back) == 2, out[site]
        welcomed = int(back[1].split()[0])
        assert lost_at <= welcomed <= lost_at + 2, (site, lost_at, welcomed)
        print(f"{site}'s loop, its daemon gone after round {lost_at}, welcomed back at round {welcomed}:\n"
              + out[site].strip())
    assert "lost geolocod" not in out["site-a"], out["site-a"]
    # Right after the rejoin, before the next sync: rank 1 holds rank 0's parameters (the wrapper checks).
    for rank in (0, 1):
        assert out["site-c"].count(f"rank {rank} holds rank 0's parameters after the rejoin") == 1, out["site-c"]
    check_job(fed, "torch-restart", rounds, ranks={"site-c": 2})
    print(f"torch-restart: site-c's daemon killed after round {killed_at}, site-b's stopped after round "
          f"{stopped_at}; their loops went on and every round has three sites")

    # --- the same under Streaming DiLoCo: a fragment may be in flight ---
    stream = "streaming: {fragments: 2, overlap: 5, alpha: 0.5}\n"
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-restart-stream", 10, stream),
                                              name="torch-restart-stream.yaml"))
    trainers = start_trainers(fed, "torch-restart-stream")
    try:
        fed.wait_for(lambda: (c.status("torch-restart-stream") or {}).get("round", 0) >= 2, 120, "round 2 on site-c")
        c.kill()
        killed_at = a.status("torch-restart-stream")["round"]
        time.sleep(1.0)
        c.start()
        out = finish(trainers)
    finally:
        stop(trainers)
    assert out["site-c"].count("geolocod is back; welcomed at round") == 1, out["site-c"]
    print("site-c's streaming loop:\n" + out["site-c"].strip())
    check_job(fed, "torch-restart-stream", 20)
    print(f"torch-restart-stream: site-c's daemon killed after round {killed_at}; its loop went on")

    # --- kind command, site-c under torchrun, one rank killed ---
    rounds = 6
    args = [EXAMPLE, "--hidden", "32", "--eval-samples", "200", "--timeout", "60",
            "--state", os.path.join(fed.root, "torch-command-state-{shard}.pt"),
            "--save", os.path.join(fed.root, "torch-command-{shard}.npz")]
    # Each site's loop from one job file: site-c (shard 2) has two processes.
    script = ('if [ "$GEOLOCO_SITE_SHARD" = 2 ]; then exec %s --nproc_per_node 2 --master_port %d %s; '
              'else exec /usr/bin/python3 %s; fi' % (shlex.join(TORCHRUN), free_ports(1)[0], shlex.join(args),
                                                     shlex.join(args)))
    trainer = "{kind: command, command: [%s]}" % ", ".join(json.dumps(x) for x in ["/bin/sh", "-c", script])
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-command", rounds, trainer=trainer),
                                              name="torch-command.yaml"))
    try:
        fed.wait_for(lambda: (c.status("torch-command") or {}).get("round", 0) >= 2, 180, "round 2 of torch-command")
        victim = trainer_of(c, local_rank=1)
        assert victim is not None, "site-c's rank 1 was not found"
        os.kill(victim, signal.SIGKILL)
        fed.wait_for(lambda: all((s.status("torch-command") or {}).get("state") == "finished" for s in fed.sites),
                     240, "torch-command to finish on every site")
    except BaseException:
        for site in fed.sites:  # what the loops geolocod started said
            with open(os.path.join(site.dir, "data", "jobs", "torch-command", "trainer.log")) as f:
                print(f"--- {site.name}'s trainer.log:\n{f.read()[-6000:]}")
        raise
    statuses = check_digests(fed, "torch-command", rounds)
    assert all(len(r["participants"]) == 3 for r in statuses["site-a"]["rounds"]), statuses["site-a"]["rounds"]
    with open(os.path.join(c.dir, "data", "jobs", "torch-command", "trainer.log")) as f:
        log = f.read()
    print("site-c's torchrun, rank 1 killed after round 2, started again by geolocod:\n" + log.strip())
    assert log.count("start: round") == 2, log  # the first group and its restart
    # The restart resumed its inner AdamW and its place in the data from the
    # state saved at its last sync: the round it is welcomed at, (round - 1) x H steps.
    restart = log[log.rindex("start: round"):]
    welcomed = int(restart.split("start: round ")[1].split(",")[0])
    assert f"resumed from the saved state: round {welcomed}, step {(welcomed - 1) * 30}" in restart, log
    saves = {"site-a": "torch-command-0", "site-b": "torch-command-1", "site-c": "torch-command-2"}
    check_final_anchor(fed, None, statuses, ranks={"site-c": 2}, files=saves)
    print(f"torch-command: {rounds} rounds on 3 sites after a rank of site-c was killed (pid {victim}); "
          f"both ranks end on the final anchor")

    # --- a job cancelled under running external loops ---
    fed["site-a"].cli("submit", fed.write_job(job_text("torch-cancel", 200), name="torch-cancel.yaml"))
    trainers = start_trainers(fed, "torch-cancel")
    try:
        fed.wait_for(lambda: (a.status("torch-cancel") or {}).get("round", 0) >= 2, 120, "round 2 of torch-cancel")
        fed["site-b"].cli("cancel", "torch-cancel")
        cancelled = time.monotonic()
        out = finish(trainers, expect=1, timeout=120)
        took = time.monotonic() - cancelled
    finally:
        stop(trainers)
    for site, text in out.items():
        assert "job torch-cancel is cancelled on this site" in text, text
        assert "geoloco status torch-cancel" in text, text
    # Not the 300 s a restarted daemon is waited for: the job's folder said it ended.
    assert took < 60, took
    print(f"torch-cancel: every site's loop stopped {took:.1f} s after the cancel, saying:",
          out["site-a"].strip().splitlines()[-1])
print("ok")
