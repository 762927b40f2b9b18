"""Load a geoloco outer-state checkpoint with numpy alone.

A checkpoint is a safetensors file (see outer/checkpoint.h):

    u64 little-endian header length N | N bytes of JSON | fp32 tensor data

The JSON maps "anchor", "momentum" and "residual/<site>" to
{"dtype": "F32", "shape": [n], "data_offsets": [begin, end]} and carries
"__metadata__" (strings): format = "geoloco.outer", format_version, job,
round, config_hash, layout (a JSON list of {name, shape}) and digests.

Like the C++ loader, this checks every length and offset against the file's
real size and refuses a truncated or foreign file with a message naming the
rule. (It does not verify the xxh3 digests: that would need the xxhash
package; the C++ loader does.)

    from geoloco.checkpoint import load, model_tensors
    ckpt = load("outer.safetensors")
    weights = model_tensors(ckpt)   # {"embed": array(shape), ...} views of the anchor
"""

import json
import os
import struct

import numpy as np

FORMAT = "geoloco.outer"
FORMAT_VERSION = "1"
MAX_HEADER_BYTES = 100 << 20


class CheckpointError(ValueError):
    """The file is not a complete, well-formed geoloco outer checkpoint."""


class Checkpoint:
    """What a checkpoint holds: metadata and flat fp32 tensors."""

    def __init__(self, job, round, config_hash, layout, tensors, metadata):
        self.job = job                  # the job's name
        self.round = round              # rounds committed
        self.config_hash = config_hash  # the job configuration's digest
        self.layout = layout            # [(name, shape tuple)] of the flat anchor
        self.tensors = tensors          # {"anchor": ndarray, "momentum": ..., "residual/<site>": ...}
        self.metadata = metadata        # the raw __metadata__ strings

    @property
    def anchor(self):
        return self.tensors["anchor"]

    @property
    def momentum(self):
        return self.tensors["momentum"]

    def residuals(self):
        """{site: residual array}."""
        prefix = "residual/"
        return {k[len(prefix):]: v for k, v in self.tensors.items() if k.startswith(prefix)}


def _fail(path, message):
    raise CheckpointError("%s: %s" % (path, message))


def load(path):
    """Reads and checks the checkpoint at `path`; raises CheckpointError."""
    with open(path, "rb") as f:
        data = f.read()
    return loads(data, source=os.fspath(path))


def loads(data, source="<bytes>"):
    """As load(), from bytes in memory."""
    size = len(data)
    if size < 8:
        _fail(source, "%d bytes, shorter than the 8-byte safetensors header length" % size)
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > MAX_HEADER_BYTES:
        _fail(source, "header length %d is over the bound of %d bytes" % (header_len, MAX_HEADER_BYTES))
    if header_len > size - 8:
        _fail(source, "header says %d bytes of JSON but the file has only %d after the length (truncated)"
              % (header_len, size - 8))
    try:
        header = json.loads(data[8:8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        _fail(source, "the safetensors header is not valid JSON (%s)" % e)
    if not isinstance(header, dict):
        _fail(source, "the safetensors header is not a JSON object")
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        _fail(source, 'not a geoloco outer checkpoint (no __metadata__.format = "%s")' % FORMAT)
    for key in ("format_version", "job", "round", "config_hash", "layout"):
        if not isinstance(meta.get(key), str):
            _fail(source, "__metadata__.%s is missing or not a string" % key)
    if meta["format_version"] != FORMAT_VERSION:
        _fail(source, "format version %s; this reader knows version %s" % (meta["format_version"], FORMAT_VERSION))
    if not meta["round"].isdigit():
        _fail(source, "__metadata__.round %r is not an unsigned decimal integer" % meta["round"])
    try:
        layout = [(t["name"], tuple(int(d) for d in t["shape"])) for t in json.loads(meta["layout"])]
    except (ValueError, TypeError, KeyError) as e:
        _fail(source, "__metadata__.layout is not a list of {name, shape} (%s)" % e)
    total = sum(int(np.prod(shape, dtype=np.int64)) for _, shape in layout)

    data_start = 8 + header_len
    data_size = size - data_start
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            _fail(source, "tensor %r is not a JSON object" % name)
        if entry.get("dtype") != "F32":
            _fail(source, "tensor %r has dtype %r; outer state is F32" % (name, entry.get("dtype")))
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if (not isinstance(shape, list) or len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 0):
            _fail(source, "tensor %r must have a 1-D shape [n]" % name)
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and o >= 0 for o in offsets)):
            _fail(source, "tensor %r must have data_offsets [begin, end]" % name)
        begin, end = offsets
        if begin > end or end - begin != 4 * shape[0]:
            _fail(source, "tensor %r has shape %s but data_offsets %s" % (name, shape, offsets))
        if end > data_size:
            _fail(source, "tensor %r ends at byte %d of the data section, but the file holds only %d (truncated)"
                  % (name, end, data_size))
        if shape[0] != total:
            _fail(source, "tensor %r has %d values but the layout has %d" % (name, shape[0], total))
        ranges.append((begin, end, name))
    ranges.sort()
    expect = 0
    for begin, end, name in ranges:
        if begin != expect:
            _fail(source, "tensor %r starts at byte %d, expected %d (ranges must not overlap or leave holes)"
                  % (name, begin, expect))
        expect = end
    if expect != data_size:
        _fail(source, "%d bytes follow the last tensor" % (data_size - expect))
    names = {name for _, _, name in ranges}
    if "anchor" not in names or "momentum" not in names:
        _fail(source, "a checkpoint needs both 'anchor' and 'momentum' tensors")

    tensors = {}
    for begin, end, name in ranges:
        if name not in ("anchor", "momentum") and not name.startswith("residual/"):
            _fail(source, "unknown tensor %r" % name)
        tensors[name] = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4, offset=data_start + begin)
    return Checkpoint(meta["job"], int(meta["round"]), meta["config_hash"], layout, tensors, meta)


def model_tensors(checkpoint):
    """The anchor cut into the model's named tensors, shaped as the layout says."""
    out, offset = {}, 0
    for name, shape in checkpoint.layout:
        n = int(np.prod(shape, dtype=np.int64))
        out[name] = checkpoint.anchor[offset:offset + n].reshape(shape)
        offset += n
    return out


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m geoloco.checkpoint FILE.safetensors")
    c = load(sys.argv[1])
    print("job %s, round %d, config %s, %d values" % (c.job, c.round, c.config_hash, c.anchor.size))
    for name, t in model_tensors(c).items():
        print("  %-24s %-16s |x|max %.6g" % (name, t.shape, float(np.abs(t).max()) if t.size else 0.0))
    for site, r in sorted(c.residuals().items()):
        print("  residual of %-12s ||e|| %.6g" % (site, float(np.linalg.norm(r))))
