#!/usr/bin/env bash
# tools/setup.sh — install the Debian packages llmtrain needs and fetch the data its tests read.
#
#   tools/setup.sh               everything tools/test.sh needs: the build's packages, the tests'
#                                references (PyTorch, h5py, SentencePiece's Python module and CLI,
#                                Prometheus, Chromium for the report's browser test, Slurm and MUNGE
#                                for the simulated cluster) and their data: GPT-2's ranks and the
#                                js-tiktoken reference encoder (data/gpt2, by tools/fetch_gpt2.sh), the
#                                cl100k_base and o200k_base ranks (data/tiktoken, by tools/fetch_tiktoken.sh)
#                                and the Brown corpus text (data/brown, by tools/fetch_brown.sh)
#   tools/setup.sh --build-only  only what building llmtrain and running a training job need
#                                (tools/quickstart.sh; curl fetches its corpus); no data
# Idempotent: apt-get skips what is already installed, the fetch scripts what is already there.
# Needs root (or sudo) when something is missing.
set -euo pipefail
BUILD_ONLY=""
case "${1:-}" in
  "") ;;
  --build-only) BUILD_ONLY=1 ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac
# Configuring and building (googletest: the build configures the test suite by default, and
# tools/test.sh reuses the same build dir), and curl for the quick start's corpus.
BUILD_PKGS=(
  build-essential cmake pkg-config git
  libhdf5-dev libsentencepiece-dev libpcre2-dev libtomlplusplus-dev prometheus-cpp-dev
  libopenmpi-dev openmpi-bin libopenblas-dev libboost-context-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libssl-dev libmicrohttpd-dev libglpk-dev
  nlohmann-json3-dev
  curl ca-certificates
)
# Only the tests use these: references, servers and tools they drive.
TEST_PKGS=(
  hdf5-tools sentencepiece prometheus
  nodejs
  python3-torch python3-h5py python3-sentencepiece python3-numpy
  chromium fonts-dejavu-core
  slurmd slurmctld slurm-client munge
  mpich libmpich-dev
)
PKGS=("${BUILD_PKGS[@]}")
if [ -z "$BUILD_ONLY" ]; then PKGS+=("${TEST_PKGS[@]}"); fi
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
if [ -n "$BUILD_ONLY" ]; then exit 0; fi
# npm comes with some nodejs builds (NodeSource's) and conflicts with Debian's npm package there.
command -v npm >/dev/null || { echo "setup: npm missing (needed to fetch GPT-2's ranks and js-tiktoken)"; $SUDO apt-get install -y -qq npm; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/tools/fetch_gpt2.sh" "$ROOT/data/gpt2"
"$ROOT/tools/fetch_tiktoken.sh" "$ROOT/data/tiktoken" "$ROOT/data/gpt2"
"$ROOT/tools/fetch_brown.sh" "$ROOT/data/brown"
