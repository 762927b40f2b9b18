"""SIGTERM stops a site cleanly mid-job: exit code 0, its trainer is
stopped, its state is checkpointed and its job marked stopped; started
again, it resumes the job and ends with the same anchor as the others.
Every round needs all three sites (min_sites 3), so nothing commits while
it is down: back, it holds the committed state, and the coordinator sends
it nothing (no state, no round-log entry). SIGINT does the same (checked
on the coordinator at the end)."""

import json
import os
import re
import signal
import socket
import threading

from federation import Federation, mlp_job

ROUNDS = 8

with Federation() as fed:
    for s in fed.sites:
        s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "15"
    # site-c runs as systemd would start a Type=notify unit with WatchdogSec=0.4s.
    notify_path = os.path.join(fed.root, "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(0.2)
    said = []

    def listen():  # as systemd does: read every datagram as it comes
        while not stop_listening.is_set():
            try:
                said.append(notify.recv(4096).decode())
            except socket.timeout:
                pass

    stop_listening = threading.Event()
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    fed["site-c"].env.update({"NOTIFY_SOCKET": notify_path, "WATCHDOG_USEC": "400000"})
    fed.start()
    # Only the stop itself checkpoints.
    job = fed.write_job(mlp_job(rounds=ROUNDS, steps=40, every=100, min_sites=3))
    a, b = fed["site-a"], fed["site-b"]
    a.cli("submit", job)
    fed.wait_for(lambda: (b.status("e2e") or {}).get("round", 0) >= 2, 120, "round 2 on site-b")
    trainers = b.trainer_pids()
    assert trainers, "site-b's trainer is not running"
    b.process.send_signal(signal.SIGTERM)
    code = b.process.wait(timeout=60)
    assert code == 0, f"geolocod exited {code} after SIGTERM"
    for pid in trainers:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower(), \
            f"trainer {pid} still runs"
    job_dir = os.path.join(b.dir, "data", "jobs", "e2e")
    status = json.load(open(os.path.join(job_dir, "status.json")))
    assert status["state"] == "stopped", status
    assert os.path.exists(os.path.join(job_dir, "checkpoint.safetensors"))
    print(f"site-b stopped by SIGTERM: exit 0, trainer stopped, {status}")
    saved = [int(r) for r in re.findall(r"checkpoint of round (\d+) saved", open(b.log_path).read())]
    assert saved, "site-b logged no checkpoint at its stop"
    a_log_from, b_log_from = os.path.getsize(a.log_path), os.path.getsize(b.log_path)
    committed = a.status("e2e")["round"]
    b.start()
    fed.wait_for(lambda: all((s.status("e2e") or {}).get("state") == "finished" for s in fed.sites), 240,
                 "the job to finish")
    assert len({s.status("e2e")["anchor_digest"] for s in fed.sites}) == 1
    with open(a.log_path) as f:
        f.seek(a_log_from)
        a_said = f.read()
    with open(b.log_path) as f:
        f.seek(b_log_from)
        b_said = f.read()
    if committed == saved[-1]:
        assert f"site-b holds the state of round {committed} already: nothing to send" in a_said, a_said[-3000:]
        assert f"a holds round {committed} with the same anchor" in b_said, b_said[-3000:]
        assert "state of round" not in b_said.replace("site-b holds the state of round", ""), b_said[-3000:]
        assert "sending the state of round" not in a_said, a_said[-3000:]
        print(f"site-b restarted on its checkpoint of round {committed}, the committed one: nothing was sent to it")
    else:
        # Its vote for the next round was in before the stop, and the round
        # committed with it: the round log's entry, never the whole state.
        offered = re.findall(r"site-b is offered the state of round .*", a_said)
        assert all("of the round log, on round" in o for o in offered), offered
        print(f"round {committed} committed with site-b's vote after its checkpoint of round {saved[-1]}: {offered}")
    stop_listening.set()
    listener.join()
    assert any("READY=1" in m for m in said), said
    watchdogs = sum("WATCHDOG=1" in m for m in said)
    assert watchdogs >= 5, f"only {watchdogs} watchdog pings in the job's lifetime: {said[:5]}"
    print(f"site-c told systemd READY=1 and pinged the watchdog {watchdogs} times")
    a.process.send_signal(signal.SIGINT)
    assert a.process.wait(timeout=60) == 0
    print("site-b resumed and finished with the others; SIGINT stops the coordinator with exit 0")
    checked = fed.check_history("e2e")
    assert "restarts: 1," in checked, checked
print("ok")
