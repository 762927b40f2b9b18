#!/bin/sh
# `pip install ./python` works offline with Debian's python3: a copy of
# python/ (so the build writes nothing into the source tree) is installed
# into a scratch virtual environment that sees Debian's packages (numpy,
# torch, pip, setuptools), without the index and without build isolation;
# then the installed package, not the source tree, must import, name its
# version, and hold geoloco.torch. Exits 77 (skip) without pip or setuptools.
set -eu
src="$1"
work="$2"
/usr/bin/python3 -m pip --version >/dev/null 2>&1 && /usr/bin/python3 -c "import setuptools" 2>/dev/null ||
  { echo "pip or setuptools missing: skipping"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
cp -r "$src" "$work/src"
/usr/bin/python3 -m venv --system-site-packages --without-pip "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$work/src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import importlib.metadata, os, sys
import geoloco, geoloco.checkpoint, geoloco.sync_client
where = os.path.dirname(geoloco.__file__)
assert where.startswith(sys.prefix), f"geoloco came from {where}, not the installed package under {sys.prefix}"
assert importlib.metadata.version("geoloco") == "0.1.0", importlib.metadata.version("geoloco")
try:
    import torch  # noqa: F401
except ImportError:
    print("installed at", where, "(no torch here: geoloco.torch not imported)")
else:
    import geoloco.torch
    assert callable(geoloco.torch.DiLoCo) and callable(geoloco.torch.load_checkpoint)
    print("installed at", where, "with geoloco.torch")
PY
