#!/usr/bin/env bash
# tools/test.sh — build llmtrain (Release) and run the whole test suite with ctest.
# This is the README's second command and exactly what .ci/run calls.
# Usage: tools/test.sh [--sanitize] [extra ctest args, e.g. -L model or -R resume]
#   --sanitize  the Sanitize build (Debug + ASan + UBSan) in build-sanitize instead, without the
#               CUDA emulator and its suites (docs/testing.md "Sanitize"); must be the first argument.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TYPE=Release
BUILD=${LLMTRAIN_BUILD_DIR:-build}
CONFIGURE_ARGS=()
if [[ ${1:-} == --sanitize ]]; then
  shift
  BUILD_TYPE=Sanitize
  BUILD=${LLMTRAIN_BUILD_DIR:-build-sanitize}
  # No nvcc backend (never runs here) and no emulator (cuda, cuda_emu labels): docs/testing.md.
  CONFIGURE_ARGS=(-DCMAKE_CUDA_COMPILER=NOTFOUND -DLLMTRAIN_CUDA_EMU=OFF)
fi
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${CONFIGURE_ARGS[@]}"
cmake --build "$BUILD" -j "$JOBS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@"
