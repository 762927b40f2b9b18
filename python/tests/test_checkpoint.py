"""Loads a checkpoint written by outer/tests/write_checkpoint_main.cpp and
checks every value against the formulas that program used.

usage: test_checkpoint.py CHECKPOINT
Exits 77 (ctest's skip code) when numpy is not installed.
"""

import json
import os
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed for %s: skipping" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from geoloco.checkpoint import CheckpointError, load, loads, model_tensors  # noqa: E402


# Bytes per element of the safetensors dtypes.
DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def safetensors_refusals(data):
    """Why the safetensors library would refuse `data` (an empty list when it
    would load it): its header rules, written from the format's definition.
    An 8-byte little-endian header length of at most 100,000,000 that fits
    the file; a UTF-8 JSON object starting with '{'; `__metadata__`, when
    present, mapping strings to strings; every other entry a known dtype, a
    shape of non-negative integers and [begin, end] offsets holding exactly
    that many bytes; the tensors, in offset order, covering the data from
    its first byte to the file's last without a gap or an overlap."""
    if len(data) < 8:
        return ["shorter than the 8-byte header length"]
    n = int.from_bytes(data[:8], "little")
    if n > 100_000_000 or n > len(data) - 8:
        return ["header length %d does not fit" % n]
    raw = data[8:8 + n]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return ["header is not UTF-8 JSON: %s" % e]
    if not raw.startswith(b"{") or not isinstance(header, dict):
        return ["header is not a JSON object starting with '{'"]
    problems = []
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        problems.append("__metadata__ is not a map of strings to strings")
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            problems.append("%s: not {dtype, shape, data_offsets}" % name)
            continue
        shape, offsets = info["shape"], info["data_offsets"]
        if info["dtype"] not in DTYPE_SIZES:
            problems.append("%s: unknown dtype %r" % (name, info["dtype"]))
            continue
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            problems.append("%s: shape %r" % (name, shape))
            continue
        if (not isinstance(offsets, list) or len(offsets) != 2 or
                not all(isinstance(o, int) and o >= 0 for o in offsets) or offsets[0] > offsets[1]):
            problems.append("%s: data_offsets %r" % (name, offsets))
            continue
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * DTYPE_SIZES[info["dtype"]]:
            problems.append("%s: %d bytes for %s %r" % (name, offsets[1] - offsets[0], info["dtype"], shape))
        spans.append((offsets[0], offsets[1], name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            problems.append("%s starts at byte %d of the data, the previous tensor ends at %d" % (name, begin, at))
        at = max(at, end)
    if not problems and at != len(data) - 8 - n:
        problems.append("the tensors cover %d bytes of the data, the file holds %d" % (at, len(data) - 8 - n))
    return problems


def header_edited(data, edit):
    """`data` with its JSON header passed through edit(dict) -> dict."""
    n = int.from_bytes(data[:8], "little")
    header = edit(json.loads(data[8:8 + n]))
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + data[8 + n:]


def check_safetensors_rules(data):
    """The checkpoint keeps every rule the safetensors library checks; and
    the rules themselves refuse files that break them (so a rule cannot
    pass by being empty)."""
    assert safetensors_refusals(data) == [], safetensors_refusals(data)

    def shift(h):
        h["momentum"]["data_offsets"] = [o + 4 for o in h["momentum"]["data_offsets"]]
        return h

    def metadata_number(h):
        h["__metadata__"]["round"] = 17
        return h

    def wrong_shape(h):
        h["anchor"]["shape"] = [19]
        return h
    broken = {
        "a trailing byte": data + b"\0",
        "a gap between tensors": header_edited(data, shift),
        "a number in __metadata__": header_edited(data, metadata_number),
        "a shape its bytes do not hold": header_edited(data, wrong_shape),
        "a header length past the end": (len(data)).to_bytes(8, "little") + data[8:],
    }
    for what, bad in broken.items():
        assert safetensors_refusals(bad), "the rules accepted a file with %s" % what


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

    with open(path, "rb") as f:
        data = f.read()
    # What the safetensors library needs of the file (it is not in Debian 12:
    # test_safetensors_library.py loads the file with it where it is installed).
    check_safetensors_rules(data)

    # Truncations and foreign files are refused, as the C++ loader refuses them.
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
