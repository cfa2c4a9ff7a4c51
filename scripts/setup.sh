#!/usr/bin/env bash
# Installs the Debian 12 packages shardscope needs, only those that are missing.
# As root it runs apt-get; otherwise it prints the exact apt-get line and stops.
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache pkg-config
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev clang-format libedit-dev
  clang libclang-rt-14-dev
  libopenmpi-dev openmpi-bin
  libimgui-dev libglfw3-dev libstb-dev libgl-dev libgl1-mesa-dri xvfb xauth
  git patchelf
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages present"
  exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root:  apt-get update && $cmd" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$cmd
