#!/bin/sh
# ctest packaging_deb: builds the Debian package from a configured and built
# tree with cpack, then checks it with dpkg-deb: control fields, the file
# list, and what the maintainer scripts do.
#
#   check_deb.sh BUILD_DIR NAME VERSION WITH_GEOLOCOD PROGRAM...
#
# WITH_GEOLOCOD is 1 when CMake has a geolocod target (its binary must then
# be in the package) and 0 before daemon/ builds one (it must not be).
# PROGRAMs are the built binaries the package needs: the test does not build
# them (a test that compiles would race the build and blow its timeout).
#
# The maintainer scripts are run for real, but harmlessly: PATH holds only
# fake commands that log their arguments, and under root the scripts run as
# nobody, so a command not faked fails instead of changing this machine.
set -u

build=${1:?usage: check_deb.sh BUILD_DIR NAME VERSION WITH_GEOLOCOD PROGRAM...}
name=$2 version=$3 with_geolocod=$4
shift 4

fail() { echo "FAIL: $*"; exit 1; }

for program in "$@"; do
  [ -x "$program" ] || fail "$program is not built; build the programs first (cmake --build $build)"
done
command -v dpkg-deb >/dev/null 2>&1 || fail "dpkg-deb not found"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/geoloco-deb.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# cpack does not build (CMAKE_SKIP_INSTALL_ALL_DEPENDENCY in packaging.cmake).
if ! cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" > "$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log"
  fail "cpack -G DEB failed"
fi
set -- "$tmp"/out/*.deb
if [ $# != 1 ] || [ ! -f "$1" ]; then
  cat "$tmp/cpack.log"
  fail "expected one .deb in $tmp/out, found: $*"
fi
deb=$1
echo "built $(basename "$deb")"

# Control fields.
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = "$name" ] || fail "Package is '$(field Package)', expected '$name'"
[ "$(field Version)" = "$version" ] || fail "Version is '$(field Version)', expected '$version'"
depends=$(field Depends)
for dep in adduser python3-numpy libc6; do
  echo ", $depends," | grep -Eq ", $dep( \([^)]*\))?," || fail "Depends lacks $dep: $depends"
done
echo "ok: Package $name, Version $version, Depends $depends"

# Files: every expected path, executables executable, nothing stray.
dpkg-deb -c "$deb" | awk '{ print $1, $NF }' > "$tmp/files"
has() { grep -q " $1\$" "$tmp/files"; }
expect_file() { has "$1" || fail "package lacks $1"; }
expect_exec() { grep -q "^-rwxr-xr-x $1\$" "$tmp/files" || fail "package lacks executable $1"; }
expect_exec ./usr/bin/geoloco
expect_exec ./usr/bin/geoloco-train
if [ "$with_geolocod" = 1 ]; then
  expect_exec ./usr/bin/geolocod
else
  ! has ./usr/bin/geolocod || fail "./usr/bin/geolocod packaged but CMake has no geolocod target"
  echo "note: no geolocod target in this build, so none is packaged"
fi
expect_file ./lib/systemd/system/geolocod.service
expect_file ./lib/systemd/system/geolocod@.service
expect_file ./usr/lib/python3/dist-packages/geoloco/__init__.py
expect_file ./usr/lib/python3/dist-packages/geoloco/checkpoint.py
expect_file ./usr/lib/python3/dist-packages/geoloco/sync_client.py
for module in torch streaming torch_checkpoint torch_state torch_group reconnect; do
  expect_file ./usr/lib/python3/dist-packages/geoloco/$module.py
done
expect_file ./usr/share/geoloco/configs/sites/site-a.yaml
expect_file ./usr/share/geoloco/configs/jobs/mlp-diloco.yaml
expect_file ./usr/share/doc/geoloco/README.md
expect_file ./usr/share/doc/geoloco/examples/torch_ddp_gpt.py
stray=$(awk '$1 !~ /^d/ { print $2 }' "$tmp/files" | grep -Ev '^\./(usr/(bin|share/geoloco/configs/(sites|jobs)|share/doc/geoloco(/examples)?)|lib/systemd/system)/[^/]+$|^\./usr/lib/python3/dist-packages/geoloco/([^_/][^/]*/)*[^/]+\.py$' || true)
[ -z "$stray" ] || fail "unexpected files in the package: $stray"
echo "ok: $(grep -vc '^d' "$tmp/files") files, all where they belong"

# Maintainer scripts: present and executable.
dpkg-deb -e "$deb" "$tmp/control"
for script in postinst prerm postrm; do
  [ -x "$tmp/control/$script" ] || fail "control archive lacks executable $script"
done
if grep -En 'systemctl.*(enable|start|restart)' "$tmp/control/postinst"; then
  fail "postinst enables or starts a service; a site needs its site.yaml and certs first"
fi

# Run a maintainer script with the fake commands. GETENT=found|missing says
# whether getent finds the geoloco user and group.
mkdir -m 0777 "$tmp/sandbox" "$tmp/sandbox/fakes"
chmod 0711 "$tmp"
for fake in getent addgroup adduser install systemctl rm find rmdir deluser delgroup; do
  cat > "$tmp/sandbox/fakes/$fake" <<EOF
#!/bin/sh
echo "$fake \$*" >> "$tmp/sandbox/calls"
if [ "$fake" = getent ]; then [ "\$GETENT" = found ]; fi
EOF
  chmod 0755 "$tmp/sandbox/fakes/$fake"
done
cp "$tmp/control/postinst" "$tmp/control/postrm" "$tmp/sandbox/"
chmod 0755 "$tmp/sandbox/postinst" "$tmp/sandbox/postrm"
as_nobody=""
if [ "$(id -u)" = 0 ]; then
  setpriv=$(command -v setpriv) || fail "running as root without setpriv (util-linux) to drop to nobody"
  as_nobody="$setpriv --reuid=nobody --regid=nogroup --clear-groups"
fi
run_script() {  # GETENT SCRIPT ARGS...
  getent_says=$1 script=$2
  shift 2
  : > "$tmp/sandbox/calls"
  chmod 0666 "$tmp/sandbox/calls"
  # shellcheck disable=SC2086  # as_nobody is a command prefix or nothing
  env -i GETENT="$getent_says" PATH="$tmp/sandbox/fakes" $as_nobody /bin/sh "$tmp/sandbox/$script" "$@" \
    || fail "$script $* exited $? (GETENT=$getent_says); calls: $(cat "$tmp/sandbox/calls")"
}
called() { grep -q "$1" "$tmp/sandbox/calls"; }

run_script missing postinst configure ""
called "^addgroup --system .*geoloco\$" || fail "postinst on a fresh system did not create the geoloco group: $(cat "$tmp/sandbox/calls")"
called "^adduser --system --ingroup geoloco --home /var/lib/geoloco --no-create-home .*geoloco\$" \
  || fail "postinst on a fresh system did not create the geoloco user: $(cat "$tmp/sandbox/calls")"
if [ ! -d /etc/geoloco ]; then
  called "^install -d -o root -g geoloco -m 0750 /etc/geoloco\$" || fail "postinst did not create /etc/geoloco root:geoloco 0750"
fi
if [ ! -d /var/lib/geoloco ]; then
  called "^install -d -o geoloco -g geoloco -m 0750 /var/lib/geoloco\$" || fail "postinst did not create /var/lib/geoloco geoloco:geoloco 0750"
fi
! called "^systemctl .*\(enable\|start\)" || fail "postinst enabled or started a unit"
echo "ok: postinst configure on a fresh system creates the geoloco group and user and their directories"

run_script found postinst configure 0.0.9
! called "^add\(user\|group\)" || fail "postinst on an upgrade tried to create the user again: $(cat "$tmp/sandbox/calls")"
echo "ok: postinst configure on an upgrade leaves the existing user alone"

run_script found postrm remove
! called "^\(rm\|deluser\|delgroup\) " || fail "postrm remove deleted data or the user: $(cat "$tmp/sandbox/calls")"
run_script found postrm purge
called "^rm -rf /var/lib/geoloco" || fail "postrm purge did not remove /var/lib/geoloco"
called "^deluser --system .*geoloco\$" || fail "postrm purge did not remove the geoloco user"
echo "ok: postrm deletes the user and /var/lib/geoloco on purge only"
