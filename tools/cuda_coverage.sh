#!/usr/bin/env bash
# tools/cuda_coverage.sh — which lines of the CUDA backend (model/cuda) the tests run, under cuda_emu.
#
# Builds the emulated backend and tests/cuda with gcc --coverage in a build dir of its own
# (default build-cuda-cov), runs test_cuda_ops and test_cuda_gpt, then prints gcov's line coverage
# per model/cuda source and checks that every kernel (every function named *_kernel, in each of
# its float and bf16 instantiations) ran at least once. Exit status 1 if one did not.
# Usage: tools/cuda_coverage.sh [build dir]      (JOBS=2 by default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-cuda-cov}
JOBS=${JOBS:-2}
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="--coverage -O0" \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage >/dev/null
cmake --build "$BUILD" --target test_cuda_ops test_cuda_gpt -j "$JOBS" >/dev/null
OBJ="$BUILD/model/cuda/emu/CMakeFiles/llmtrain_cuda_emu.dir/__"
find "$BUILD" -name '*.gcda' -delete  # stale counts of an earlier build would not merge
export CUDA_EMU_WORKERS=2 OMP_NUM_THREADS=2
"$BUILD/tests/cuda/test_cuda_ops" >/dev/null
"$BUILD/tests/cuda/test_cuda_gpt" >/dev/null

cd "$OBJ"
echo "Line coverage of model/cuda under the emulated tests (gcov):"
# Objects are named <file>.cu.o, so gcov is pointed at each object (it then finds <file>.cu.gcda).
report=$(for src in "$ROOT"/model/cuda/*.cu; do gcov -n -f -m -o "$(basename "$src").o" "$src" 2>/dev/null || true; done)
# Per-file line summaries, restricted to model/cuda sources and headers (headers appear once per
# translation unit that includes them; the maximum is shown).
echo "$report" | awk '
    /^File / { f = $2; gsub(/\047/, "", f) }
    /^Function / { fn = substr($0, 10) }
    /^Lines executed:/ && f ~ /model\/cuda\// && fn == "" {
        split($2, a, "%"); pct = substr(a[1], 10) + 0; n = $4
        name = f; sub(/.*model\/cuda\//, "model/cuda/", name)
        if (!(name in best) || pct > best[name]) { best[name] = pct; lines[name] = n }
    }
    /^$/ { fn = "" }
    END { for (k in best) printf "  %-32s %6.2f%% of %s lines\n", k, best[k], lines[k] }' | sort
# Kernels: every "Function '...' executed" block of a *_kernel must have run lines.
missed=$(echo "$report" | awk '
    /^Function / { fn = substr($0, 10); next }
    /^Lines executed:/ && fn ~ /_kernel/ { split($2, a, "%"); if (substr(a[1], 10) + 0 == 0) print fn; fn = "" }')
kernels=$(echo "$report" | grep -c "^Function '.*_kernel" || true)
if [ -n "$missed" ]; then
    echo "Kernels never run by the tests:"; echo "$missed"; exit 1
fi
echo "All $kernels kernel instantiations ran."
