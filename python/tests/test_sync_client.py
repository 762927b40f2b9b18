"""The Python client against the C++ daemon side, numpy only.

Run by ctest through inner_protocol_sync_host (the one-site "daemon": the
trainer's initial parameters become the anchor; each SYNC moves the anchor
half way to the replica, in fp32), which checks from its side that it saw 6
SYNCs (3 rounds x 2 fragments, in round order) and 2 refusals:

    inner_protocol_sync_host --rounds 3 --fragments 2 --expect-syncs 6 \
        --expect-refusals 2 SOCKET -- /usr/bin/python3 test_sync_client.py

This side checks the wire bytes, the segment's values after every RESULT
(exactly: the same fp32 operations), the rounds, a refused round, a refused
layout, and a reconnect that resumes at the daemon's rounds and anchor.
Exits 77 (ctest's skip code) when numpy is not installed.
"""

import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed for %s: skipping" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from geoloco.sync_client import (DaemonRefused, SyncClient, SyncError, decode_body, decode_header,  # noqa: E402
                                 encode_sync, layout_of, ERROR, PhasePlan, WELCOME)

SOCKET = os.environ["GEOLOCO_SOCKET"]
JOB = os.environ["GEOLOCO_JOB"]
LAYOUT = layout_of([("w", (3, 4)), ("b", (4,)), ("v", (5,))])
HALF = np.float32(0.5)


def outer_step(anchor, replica):
    # The host's step, in the same fp32 operations: anchor − 0.5·(anchor − replica).
    return anchor - HALF * (anchor - replica)


def sync_round(c, anchor, r, shift, expect_stop=False):
    """One round of both fragments; checks RESULT fields and the new anchor."""
    for f in range(2):
        fr = c.fragments[f]
        replica = anchor[fr.offset:fr.offset + fr.length] + np.float32(shift + f)
        c.fragment_values(f)[:] = replica
        c.sync(c.next_round(f), f, tokens=32 * (r + 1), loss=1.0 / (r + 1), timing=(0.5, 1.0) if r % 2 else None)
        res = c.wait_result(10.0)
        assert (res.round, res.fragment, res.next_round, res.stop) == (r, f, r + 1, expect_stop), res
        anchor[fr.offset:fr.offset + fr.length] = outer_step(anchor[fr.offset:fr.offset + fr.length], replica)
        np.testing.assert_array_equal(c.fragment_values(f), anchor[fr.offset:fr.offset + fr.length])


def main():
    # The bytes of a SYNC are the same as C++ writes (inner/protocol/tests/message_test.cpp).
    golden = ("474c5331" "01" "04" "0000" "20000000"  # magic, version, SYNC, reserved, body length 32
              "0300000000000000" "01000000" "00000000"  # round 3, fragment 1, reserved
              "e803000000000000" "000000000000e03f")  # tokens 1000, loss 0.5
    assert encode_sync(3, 1, 1000, 0.5).hex() == golden, encode_sync(3, 1, 1000, 0.5).hex()
    # With the trainer's timing (flag bit 0, two doubles after the loss), as C++ writes it too.
    timed = ("474c5331" "01" "04" "0000" "30000000"  # body length 48
             "0300000000000000" "01000000" "01000000"  # round 3, fragment 1, flags: timed
             "e803000000000000" "000000000000e03f"  # tokens 1000, loss 0.5
             "0000000000000040" "000000000000d03f")  # compute 2.0 s, loop 0.25 s
    assert encode_sync(3, 1, 1000, 0.5, (2.0, 0.25)).hex() == timed
    try:
        encode_sync(3, 1, 1000, 0.5, (float("nan"), 1.0))
        raise AssertionError("a NaN timing was encoded")
    except ValueError as e:
        assert "finite non-negative" in str(e), e
    # A WELCOME with the job's phase plan (as message_test.cpp encodes it): the plan is read,
    # and a plan no trainer could follow is refused.
    fixed = struct.pack("<IQI", 2, 9, 1) + struct.pack("<QQQ", 0, 9, 1)
    plan = struct.pack("<QdQQdIIQQ", 30, 0.0, 1, 29, 0.0, 1, 0, 1, 12)
    kind, flags, values, frags, got = decode_body(WELCOME, fixed + plan)
    assert (kind, values, len(frags)) == ("WELCOME", 9, 1), (kind, values, frags)
    assert got == PhasePlan(30, 0.0, 1, 29, 0.0, True, 1, 12), got
    for bad, why in ((struct.pack("<QdQQdIIQQ", 30, 5.0, 1, 0, 0.0, 0, 0, 1, 0), "exactly one of H"),
                     (struct.pack("<QdQQdIIQQ", 30, 0.0, 1, 0, 1.5, 0, 0, 1, 0), "alpha"),
                     (plan[:-8], "phase plan is 56 bytes")):
        try:
            decode_body(WELCOME, fixed + bad)
            raise AssertionError("a bad plan was accepted: %s" % why)
        except SyncError as e:
            assert why in str(e), (why, e)
    # A truncated ERROR from a daemon is refused by length, not misread.
    try:
        decode_body(ERROR, bytes(10))
    except SyncError as e:
        assert e.code == "truncated", e
    else:
        raise AssertionError("a 10-byte ERROR body was accepted")
    try:
        decode_header(b"GLS1\x02\x05\x00\x00\x00\x00\x00\x00")
    except SyncError as e:
        assert e.code == "unsupported" and "protocol version 2" in e.message, e
    else:
        raise AssertionError("a version 2 header was accepted")

    c = SyncClient.connect(SOCKET, JOB, LAYOUT, connect_timeout=10, welcome_timeout=10)
    assert not c.anchor_ready
    assert [tuple(f) for f in c.fragments] == [(0, 12, 0), (12, 9, 0)], c.fragments
    assert c.params.dtype == np.float32 and c.params.shape == (21,)
    c.params[:] = np.arange(21, dtype=np.float32) * HALF
    c.send_initial(10.0)
    assert c.anchor_ready
    anchor = np.arange(21, dtype=np.float32) * HALF  # the host adopts the trainer's own parameters
    np.testing.assert_array_equal(c.params, anchor)
    assert c.tensor("w").shape == (3, 4) and c.tensor("b")[1] == np.float32(6.5) and c.tensor("v").shape == (5,)

    sync_round(c, anchor, 0, shift=1.0)

    # A round the trainer is not in: refused with the reason, the session goes on.
    c.fragment_values(0)[:] = anchor[0:12]
    c.sync(5, 0, tokens=1, loss=1.0)
    try:
        c.wait_result(10.0)
    except DaemonRefused as e:
        assert e.code == "mismatch" and not e.fatal and e.round == 5 and e.fragment == 0, e
        assert "SYNC is for round 5 but fragment 0 is due for round 1" in e.message, e
    else:
        raise AssertionError("a SYNC for round 5 was accepted in round 1")
    sync_round(c, anchor, 1, shift=-3.0)
    c.close()

    # Another model on the same job: refused, naming the difference.
    other = layout_of([("w", (4, 3)), ("b", (4,)), ("v", (5,))])
    try:
        SyncClient.connect(SOCKET, JOB, other, connect_timeout=10, welcome_timeout=10)
    except DaemonRefused as e:
        assert e.code == "mismatch" and e.fatal, e
        assert "tensor 0 ('w'): the job expects shape [3, 4], the trainer sent [4, 3]" in e.message, e
    else:
        raise AssertionError("a trainer with another layout was welcomed")

    # A restarted trainer gets the daemon's anchor and rounds.
    with SyncClient.connect(SOCKET, JOB, LAYOUT, connect_timeout=10, welcome_timeout=10) as c:
        assert c.anchor_ready
        assert c.next_round(0) == 2 and c.next_round(1) == 2
        np.testing.assert_array_equal(c.params, anchor)
        sync_round(c, anchor, 2, shift=0.25, expect_stop=True)
        assert c.stopped
    print("ok: python client synced 3 rounds of 2 fragments; refusals and reconnect checked")


if __name__ == "__main__":
    main()
