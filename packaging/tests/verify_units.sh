#!/bin/sh
# ctest systemd_units_verify: `systemd-analyze verify` on copies of the shipped
# units, the template as an instance (geolocod@site-a.service).
#
#   verify_units.sh UNIT_DIR
#
# Exit 0: both units verify cleanly. Exit 77 (ctest SKIP_RETURN_CODE): this
# machine cannot verify units (no systemd-analyze, or it fails even on a
# trivial unit), with the reason printed. Anything else: a unit is broken.
#
# What is checked: the exit status under --recursive-errors=no, which is
# non-zero when the named unit itself has a problem (unknown key, a value
# that does not parse such as Type=bogus, a missing ExecStart binary) and
# ignores warnings about units it merely references (network-online.target
# and the like, which differ between hosts and containers). Without that
# option verify exits 0 even for Type=bogus. To prove the check can fail
# here, a copy with Type=bogus must be rejected before the real units count.
# ExecStart is rewritten to an existing program, since /usr/bin/geolocod is
# not installed where the tests run.
set -u

unit_dir=${1:?usage: verify_units.sh UNIT_DIR}
skip=77

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not found (Debian package: systemd); the units were not verified"
  exit $skip
fi
true_bin=$(command -v true) || true_bin=/bin/true
case "$true_bin" in /*) ;; *) true_bin=/bin/true ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/geoloco-units.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

verify() {
  # Each unit alone in its own folder: verify prefers units found next to
  # the one it checks, so copies must not see each other.
  systemd-analyze verify --recursive-errors=no --man=no --generators=no "$@" 2>&1
}

# 1. Can this machine verify anything? A trivial unit must pass.
mkdir "$tmp/probe"
printf '[Service]\nType=oneshot\nExecStart=%s\n' "$true_bin" > "$tmp/probe/probe.service"
if ! out=$(verify "$tmp/probe/probe.service"); then
  echo "SKIP: systemd-analyze verify fails even on a trivial unit here ($(systemd-analyze --version | head -n 1)):"
  echo "$out"
  exit $skip
fi

# Copies the unit to $tmp/NAME/ with ExecStart on an existing program.
copy_unit() {
  mkdir "$tmp/$2"
  sed "s|^ExecStart=/usr/bin/geolocod|ExecStart=$true_bin|" "$unit_dir/$1" > "$tmp/$2/$1"
  if ! grep -q "^ExecStart=$true_bin " "$tmp/$2/$1"; then
    echo "FAIL: $1 has no 'ExecStart=/usr/bin/geolocod ...' line to check"
    exit 1
  fi
}

# 2. The check must be able to fail: a broken copy is rejected.
copy_unit geolocod.service broken
sed -i 's/^Type=notify$/Type=bogus/' "$tmp/broken/geolocod.service"
if out=$(verify "$tmp/broken/geolocod.service"); then
  echo "FAIL: systemd-analyze verify accepted Type=bogus, so a pass would prove nothing:"
  echo "$out"
  exit 1
fi
echo "ok: a copy with Type=bogus is rejected: $out"

# 3. The shipped units.
status=0
copy_unit geolocod.service single
if out=$(verify "$tmp/single/geolocod.service"); then
  echo "ok: geolocod.service verifies${out:+ (notes: $out)}"
else
  echo "FAIL: geolocod.service:"
  echo "$out"
  status=1
fi
copy_unit geolocod@.service template
if out=$(verify "$tmp/template/geolocod@.service:geolocod@site-a.service"); then
  echo "ok: geolocod@.service verifies as geolocod@site-a.service${out:+ (notes: $out)}"
else
  echo "FAIL: geolocod@.service as geolocod@site-a.service:"
  echo "$out"
  status=1
fi
exit $status
