#!/bin/sh
# ctest packaging_install_deb (label "install", opt-in: scripts/test.sh
# --install): installs the Debian package on THIS machine with apt, sets a
# site up as packaging/README.md says, runs the installed geolocod as the
# geoloco user for a few seconds (status over its control socket, metrics,
# SIGTERM gives exit 0), then purges the package and checks that the user,
# /var/lib/geoloco and the programs are gone.
#
#   install_deb.sh BUILD_DIR
#
# Needs root and apt-get; skipped (77) otherwise, and when a geoloco package
# or user is already there (it would not be this test's to remove).
set -u

build=${1:?usage: install_deb.sh BUILD_DIR}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "installing a package needs root"
command -v apt-get >/dev/null 2>&1 || skip "apt-get not found"
dpkg-query -W -f='${Status}' geoloco 2>/dev/null | grep -q "install ok" && skip "a geoloco package is installed already"
getent passwd geoloco >/dev/null && skip "a geoloco user exists already"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/geoloco-install.XXXXXX") || exit 1
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
  if dpkg-query -W -f='${Status}' geoloco 2>/dev/null | grep -q "install ok"; then
    apt-get purge -y geoloco > "$tmp/purge.log" 2>&1
  fi
  rm -rf /etc/geoloco /run/geoloco "$tmp"
}
trap cleanup EXIT

cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" > "$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/out/*.deb)
apt-get install -y "$deb" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "apt-get install $deb failed"; }
echo "installed $(basename "$deb")"

# What the package set up.
getent passwd geoloco >/dev/null || fail "no geoloco user after the install"
[ "$(stat -c '%U:%G %a' /etc/geoloco)" = "root:geoloco 750" ] || fail "/etc/geoloco is $(stat -c '%U:%G %a' /etc/geoloco)"
[ "$(stat -c '%U:%G %a' /var/lib/geoloco)" = "geoloco:geoloco 750" ] ||
  fail "/var/lib/geoloco is $(stat -c '%U:%G %a' /var/lib/geoloco)"
for f in /usr/bin/geolocod /usr/bin/geoloco /usr/bin/geoloco-train /lib/systemd/system/geolocod.service \
         /lib/systemd/system/geolocod@.service /usr/share/geoloco/configs/sites/site-a.yaml; do
  [ -e "$f" ] || fail "$f is missing"
done
(cd / && /usr/bin/python3 -c "import geoloco.checkpoint, geoloco.sync_client") || fail "python3 cannot import geoloco"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then  # python3-torch is suggested, not required
  (cd / && /usr/bin/python3 -c "import geoloco.torch") || fail "python3 cannot import geoloco.torch"
fi

# A site, set up as packaging/README.md says, on free loopback ports.
ports=$(/usr/bin/python3 -c "
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")
set -- $ports
/usr/bin/geoloco certs init --out "$tmp/ca" > /dev/null || fail "geoloco certs init"
/usr/bin/geoloco certs issue --ca "$tmp/ca" --site site-a --out "$tmp/site" > /dev/null || fail "geoloco certs issue"
install -d -o root -g geoloco -m 0750 /etc/geoloco/tls
install -o root -g geoloco -m 0640 "$tmp/site/ca.pem" "$tmp/site/site.pem" "$tmp/site/site.key" /etc/geoloco/tls/
sed -e "s|demo/tls/site-a/|/etc/geoloco/tls/|" -e "s|data_dir: .*|data_dir: /var/lib/geoloco|" \
    -e "s|control_socket: .*|control_socket: /run/geoloco/geolocod.sock|" \
    -e "s|listen: .*|listen: 127.0.0.1:$1|" -e "s|metrics: .*|metrics: 127.0.0.1:$2|" \
    /usr/share/geoloco/configs/sites/site-a.yaml > "$tmp/site.yaml"
install -o root -g geoloco -m 0640 "$tmp/site.yaml" /etc/geoloco/site.yaml
install -d -o geoloco -g geoloco -m 0750 /run/geoloco  # systemd's RuntimeDirectory=geoloco
runuser -u geoloco -- /usr/bin/geolocod --config /etc/geoloco/site.yaml --check ||
  fail "the installed geolocod refuses the site file"

# setpriv execs (runuser would fork, and answer SIGTERM for the daemon).
setpriv --reuid=geoloco --regid=geoloco --init-groups /usr/bin/geolocod --config /etc/geoloco/site.yaml \
  > "$tmp/geolocod.log" 2>&1 &
daemon_pid=$!
ok=0
for _ in $(seq 50); do
  if /usr/bin/geoloco status --socket /run/geoloco/geolocod.sock > "$tmp/status.txt" 2>&1; then ok=1; break; fi
  sleep 0.2
done
[ "$ok" = 1 ] || { cat "$tmp/geolocod.log" "$tmp/status.txt"; fail "geoloco status cannot reach the installed daemon"; }
grep -q "site site-a" "$tmp/status.txt" || { cat "$tmp/status.txt"; fail "unexpected status"; }
/usr/bin/python3 -c "
import urllib.request, sys
body = urllib.request.urlopen('http://127.0.0.1:$2/metrics', timeout=5).read().decode()
sys.exit(0 if 'geoloco_' in body else 1)" || fail "no geoloco_ metrics on 127.0.0.1:$2"
kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=
[ "$rc" = 0 ] || { cat "$tmp/geolocod.log"; fail "geolocod exited $rc on SIGTERM"; }
echo "the installed geolocod ran as user geoloco: status and metrics answered, SIGTERM exit 0"

# Purge: the user, its state folder and the programs go.
apt-get purge -y geoloco > "$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log"; fail "apt-get purge geoloco failed"; }
getent passwd geoloco >/dev/null && fail "the geoloco user is still there after the purge"
[ -e /var/lib/geoloco ] && fail "/var/lib/geoloco is still there after the purge"
[ -e /usr/bin/geolocod ] && fail "/usr/bin/geolocod is still there after the purge"
echo "purged: user, /var/lib/geoloco and programs removed"
echo "ok"
