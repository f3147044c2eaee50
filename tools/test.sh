#!/usr/bin/env bash
# tools/test.sh — build llmtrain (Release) and run the whole test suite with ctest.
# This is the README's second command and exactly what .ci/run calls.
# Usage: tools/test.sh [extra ctest args, e.g. -L model or -R resume]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${LLMTRAIN_BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$JOBS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@"
