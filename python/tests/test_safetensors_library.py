"""Loads a checkpoint written by outer/tests/write_checkpoint_main.cpp with
the safetensors library (safetensors.numpy, and safetensors.torch where
torch is installed) and checks it holds what geoloco's own loader reads:
every tensor bit for bit, and the metadata.

usage: test_safetensors_library.py CHECKPOINT
Exits 77 (ctest's skip code) when the safetensors library or numpy is not
installed: Debian 12 does not package safetensors.
"""

import os
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as e:
    print("%s for %s: skipping" % (e, sys.executable))
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from geoloco.checkpoint import load  # noqa: E402


def main(path):
    ours = load(path)
    theirs = load_file(path)
    expected = {"anchor": ours.anchor, "momentum": ours.momentum}
    expected.update({"residual/" + site: v for site, v in ours.residuals().items()})
    assert sorted(theirs) == sorted(expected), (sorted(theirs), sorted(expected))
    for name, values in expected.items():
        assert theirs[name].dtype == np.float32, (name, theirs[name].dtype)
        assert np.array_equal(theirs[name].view(np.uint32), values.view(np.uint32)), name
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
    assert meta["job"] == ours.job and int(meta["round"]) == ours.round, meta
    try:
        import torch
        from safetensors.torch import load_file as load_torch
    except ImportError:
        print("torch is not installed: safetensors.torch not tried")
    else:
        anchor = load_torch(path)["anchor"]
        assert anchor.dtype == torch.float32 and torch.equal(anchor, torch.from_numpy(ours.anchor.copy())), anchor
    print("ok: the safetensors library loaded %s: %d tensors, the same bits as geoloco's loader"
          % (path, len(theirs)))


if __name__ == "__main__":
    main(sys.argv[1])
