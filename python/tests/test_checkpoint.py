"""Loads a checkpoint written by outer/tests/write_checkpoint_main.cpp and
checks every value against the formulas that program used.

usage: test_checkpoint.py CHECKPOINT
Exits 77 (ctest's skip code) when numpy is not installed.
"""

import os
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed for %s: skipping" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from geoloco.checkpoint import CheckpointError, load, loads, model_tensors  # noqa: E402


def main(path):
    c = load(path)
    assert c.job == "python-test", c.job
    assert c.round == 17, c.round
    assert c.config_hash == "cfg-abc", c.config_hash
    assert c.layout == [("embed", (3, 4)), ("head", (5,)), ("bias", ())], c.layout
    i = np.arange(18, dtype=np.float32)
    # The same fp32 arithmetic as the writer: exact equality.
    np.testing.assert_array_equal(c.anchor, np.float32(0.5) * i - np.float32(3))
    np.testing.assert_array_equal(c.momentum, np.float32(0.25) * i)
    res = c.residuals()
    assert sorted(res) == ["dc-east", "dc-west"], sorted(res)
    np.testing.assert_array_equal(res["dc-east"], np.full(18, 0.125, dtype=np.float32))
    np.testing.assert_array_equal(res["dc-west"], np.full(18, -2.0, dtype=np.float32))
    m = model_tensors(c)
    assert m["embed"].shape == (3, 4) and m["head"].shape == (5,) and m["bias"].shape == ()
    assert m["embed"][2, 3] == np.float32(0.5) * 11 - 3
    assert float(m["bias"]) == 0.5 * 17 - 3

    # Truncations and foreign files are refused, as the C++ loader refuses them.
    with open(path, "rb") as f:
        data = f.read()
    for cut in (0, 7, 8, 20, len(data) // 2, len(data) - 1):
        try:
            loads(data[:cut], "cut")
        except CheckpointError as e:
            assert str(e).startswith("cut: "), e
        else:
            raise AssertionError("a file cut at %d bytes was accepted" % cut)
    foreign = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    try:
        loads(len(foreign).to_bytes(8, "little") + foreign + bytes(4), "foreign")
    except CheckpointError as e:
        assert "not a geoloco outer checkpoint" in str(e), e
    else:
        raise AssertionError("a foreign safetensors file was accepted")
    print("ok: python loaded %s (round %d, %d values)" % (path, c.round, c.anchor.size))


if __name__ == "__main__":
    main(sys.argv[1])
