"""The Python side's pure functions, with numpy alone: Streaming DiLoCo's
schedule and merge (geoloco.streaming, the same values as
diloco/tests/schedule_test.cpp and geoloco-train's float64 merge), and
what a job's status.json says to a trainer that lost its daemon
(geoloco.sync_client.job_state). Exits 77 (skipped) without numpy."""

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
from geoloco.sync_client import job_state  # noqa: E402

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
print("ok")
