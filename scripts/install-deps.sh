#!/usr/bin/env bash
# Installs the Debian packages geoloco builds and runs with (docs/design.md §9), only
# those that are missing. Idempotent; prints nothing when everything is there.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libasio-dev libssl-dev openssl libzstd-dev libyaml-cpp-dev catch2 libxxhash-dev
  libcli11-dev libspdlog-dev nlohmann-json3-dev libopenblas-dev libsystemd-dev
  libgloo-dev prometheus-cpp-dev zlib1g-dev python3 python3-numpy python3-torch python3-pip python3-setuptools
  python3-matplotlib dataset-fashion-mnist bible-kjv
  clang libclang-rt-14-dev clang-format strace
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
