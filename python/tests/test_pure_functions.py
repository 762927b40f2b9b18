"""The Python side's pure functions, with numpy alone: Streaming DiLoCo's
schedule and merge (geoloco.streaming, the same values as
diloco/tests/schedule_test.cpp and geoloco-train's float64 merge), and
what a job's status.json says to a trainer that lost its daemon
(geoloco.sync_client.job_state) and how a loop waits for a daemon that
went away (geoloco.reconnect, with a fixed clock). Exits 77 (skipped) without numpy."""

import json
import os
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy is not installed for %s: skipping" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from geoloco.streaming import merge_fragment, phase_steps  # noqa: E402
from geoloco.reconnect import FINISHED, wait_for_daemon  # noqa: E402
from geoloco.sync_client import DaemonRefused, SyncError, job_state  # noqa: E402

# The schedule: F fragments share H steps, one fragment per round.
assert [phase_steps(r, 1, 3, 10) for r in (1, 2, 3, 4)] == [3, 3, 4, 3]
assert phase_steps(7, 5, 3, 10) == 4  # a job whose first round is 5
assert phase_steps(2, 5, 3, 10) == 3  # before the first: counted as the first
assert phase_steps(9, 1, 1, 30) == 30
for f in (1, 2, 3, 4, 7):
    for h in (1, 5, 10, 30, 31):
        # Every period of F rounds is H steps, whatever the first round.
        for first in (1, 4):
            assert sum(phase_steps(r, first, f, h) for r in range(first + f, first + 2 * f)) == h, (f, h, first)

rng = np.random.default_rng(7)
glob, local, at_sync = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
# α = 0: the global values, bit for bit, in a copy.
out = merge_fragment(glob, local, None, 0.0, False)
assert out.dtype == np.float32 and np.array_equal(out, glob) and out is not glob
# α: computed in float64, rounded once.
want = (0.25 * local.astype(np.float64) + 0.75 * glob.astype(np.float64)).astype(np.float32)
assert np.array_equal(merge_fragment(glob, local, None, 0.25, False), want)
assert not np.array_equal(want, (np.float32(0.25) * local + np.float32(0.75) * glob)), "the test tells float32 apart"
# Delayed: the global values plus the local progress since the sync.
want = (glob.astype(np.float64) + (local.astype(np.float64) - at_sync.astype(np.float64))).astype(np.float32)
assert np.array_equal(merge_fragment(glob, local, at_sync, 0.0, True), want)
try:
    merge_fragment(glob, local, None, 0.0, True)
    raise AssertionError("a delayed merge without the synced values was computed")
except ValueError as e:
    assert "synced with" in str(e), e

# job_state: what geolocod wrote next to the sync socket, or None.
with tempfile.TemporaryDirectory() as d:
    sock = os.path.join(d, "sync.sock")
    assert job_state(sock) is None  # no status.json
    with open(os.path.join(d, "status.json"), "w") as f:
        json.dump({"state": "cancelled", "file": "x.yaml", "message": "cancelled on site-b with geoloco cancel"}, f)
    assert job_state(sock) == ("cancelled", "cancelled on site-b with geoloco cancel")
    with open(os.path.join(d, "status.json"), "w") as f:
        f.write('{"state": "running"')  # torn
    assert job_state(sock) is None
    with open(os.path.join(d, "status.json"), "w") as f:
        json.dump({"state": 3}, f)
    assert job_state(sock) is None


# wait_for_daemon: a fake clock; connect's outcomes scripted.
class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def scripted(*outcomes, clock=None, cost=1.0):
    """connect(timeout) that raises or returns the outcomes in turn, each try taking `cost` seconds."""
    calls = []

    def connect(timeout):
        calls.append(timeout)
        if clock is not None:
            clock.now += cost
        o = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(o, Exception):
            raise o
        return o
    return connect, calls


lost = SyncError("io", "the daemon closed the connection")
absent = SyncError("timeout", "no daemon answered on 'x' within 1.0 s")
reset = SyncError("io", "receive: [Errno 104] Connection reset by peer")
with tempfile.TemporaryDirectory() as d:
    sock = os.path.join(d, "sync.sock")

    def status(state, message=""):
        with open(os.path.join(d, "status.json"), "w") as f:
            json.dump({"state": state, "message": message}, f)

    # Not listening, then a reset by a dying daemon, then welcomed: its value.
    status("running")
    clock = Clock()
    connect, calls = scripted(absent, reset, ("plan", "streaming", 1), clock=clock)
    assert wait_for_daemon(sock, "j", 300, connect, lost, clock.sleep, clock) == ("plan", "streaming", 1)
    assert len(calls) == 3 and clock.slept == [0.2], (calls, clock.slept)
    # A daemon that asks to connect again (ERROR io) is tried again; one that refuses is not.
    connect, calls = scripted(DaemonRefused("io", "connect again", True, 1, 0, 0), "ok")
    assert wait_for_daemon(sock, "j", 300, connect, lost, Clock().sleep, Clock()) == "ok"
    connect, calls = scripted(DaemonRefused("mismatch", "the layout differs", True, 1, 0, 0))
    try:
        wait_for_daemon(sock, "j", 300, connect, lost, Clock().sleep, Clock())
        raise AssertionError("a refusal was tried again")
    except DaemonRefused as e:
        assert e.code == "mismatch" and len(calls) == 1
    # A daemon that accepts but never welcomes: its timeout is final.
    connect, calls = scripted(SyncError("timeout", "no answer from the daemon within 60.0 s"))
    try:
        wait_for_daemon(sock, "j", 300, connect, lost, Clock().sleep, Clock())
        raise AssertionError("a silent daemon was waited for again")
    except SyncError as e:
        assert "no answer" in e.message and len(calls) == 1
    # Nobody for `seconds`: the error says so, after about that many seconds of tries.
    clock = Clock()
    connect, calls = scripted(absent, clock=clock)
    try:
        wait_for_daemon(sock, "j", 30, connect, lost, clock.sleep, clock)
        raise AssertionError("waited forever")
    except SyncError as e:
        assert e.code == "io" and "did not serve job j again within 30 s" in e.message, e
        assert len(calls) == 30 and clock.now == 30, (len(calls), clock.now)
    # An ended job is not waited for: cancelled and failed raise at once,
    # naming the state and the reason; finished returns FINISHED.
    for state in ("cancelled", "failed"):
        status(state, "cancelled on site-b with geoloco cancel")
        connect, calls = scripted("never")
        try:
            wait_for_daemon(sock, "j", 300, connect, lost, Clock().sleep, Clock())
            raise AssertionError(state + " was waited for")
        except SyncError as e:
            assert ("job j is %s on this site (cancelled on site-b with geoloco cancel)" % state) in e.message, e
            assert calls == []
    status("finished", "finished after round 20")
    connect, calls = scripted("never")
    assert wait_for_daemon(sock, "j", 300, connect, lost, Clock().sleep, Clock()) == FINISHED and calls == []
    # Stopped (geolocod shut down; it resumes the job when it starts): waited for.
    status("stopped")
    connect, calls = scripted(absent, "back")
    assert wait_for_daemon(sock, "j", 300, connect, lost, Clock().sleep, Clock()) == "back" and len(calls) == 2
print("ok")
