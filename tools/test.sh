#!/usr/bin/env bash
# tools/test.sh — build llmtrain (Release) and run the whole test suite with ctest.
# This is the README's second command and exactly what .ci/run calls. It first runs tools/setup.sh
# (idempotent): the tests' references (PyTorch, Prometheus, Chromium, ...) that tools/quickstart.sh
# leaves out, and the test data.
# Usage: tools/test.sh [--sanitize] [extra ctest args, e.g. -L model or -R resume]
#   --sanitize  the Sanitize build (Debug + ASan + UBSan) in build-sanitize instead, without the
#               CUDA emulator and its suites (docs/testing.md "Sanitize"); must be the first argument.
# The MPICH variant (docs/testing.md "The MPICH variant"): without extra ctest args and without
# --sanitize, it also builds the targets of the tests labelled `mpich` against MPICH in build-mpich
# (-DLLMTRAIN_MPI=mpich, no CUDA) and runs `ctest -L mpich` there after the main suite; its result
# counts in the exit status. LLMTRAIN_TEST_MPICH=0 leaves it out, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
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
MPICH=0
[[ $BUILD_TYPE == Release && $# == 0 ]] && MPICH=1
MPICH_BUILD=${LLMTRAIN_MPICH_BUILD_DIR:-build-mpich}
# What the `mpich`-labelled tests run, and the tiny dataset fixture they need.
MPICH_TARGETS=(llmtrain make_tiny_dataset zero_resave test_mpi_comm test_hier_comm test_liveness test_mpi_timeout)
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${CONFIGURE_ARGS[@]}"
cmake --build "$BUILD" -j "$JOBS"
mpich_status=0
if ((MPICH)) && [[ ${LLMTRAIN_TEST_MPICH:-1} != 0 ]]; then
  { cmake -S . -B "$MPICH_BUILD" -DCMAKE_BUILD_TYPE=Release -DLLMTRAIN_MPI=mpich \
      -DCMAKE_CUDA_COMPILER=NOTFOUND -DLLMTRAIN_CUDA_EMU=OFF &&
    cmake --build "$MPICH_BUILD" -j "$JOBS" --target "${MPICH_TARGETS[@]}"; } || mpich_status=$?
  ((mpich_status == 0)) || echo "tools/test.sh: the MPICH build ($MPICH_BUILD) FAILED; its tests are not run"
elif ((MPICH)); then
  MPICH=0
  echo "tools/test.sh: WARNING: the MPICH variant is left out (LLMTRAIN_TEST_MPICH=0)"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A plain llmtrain (no mpirun: hundreds of the suite's starts) starts Open MPI as an isolated
# singleton, without forking its orted daemon, as the GPU bundle's does (tools/gpu/bundle_env.sh):
# ~0.4 s less per start (app_checkpoint_faults 52.9 -> 38.4 s, config_cli_errors 35.7 -> 27.4 s
# alone). Jobs under mpirun, and MPICH, do not read it. The point-to-point layer is named: ob1 is what
# Open MPI picks here anyway, and naming it skips opening the cm layer's PSM/PSM2 transports, which
# found no hardware after ~0.25 s at every MPI_Init (a singleton's --print-config 0.62 -> 0.36 s,
# median of 8; config_cli_errors 15 -> 9 s alone).
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1
MPICH_BUILD=$(cd "$MPICH_BUILD" 2>/dev/null && pwd || echo "$MPICH_BUILD")
cd "$BUILD"
# After ctest's "N% tests passed, M tests failed out of K" come one loud line if the CUDA emulator (so
# the cuda and cuda_emu suites) was not built, the MPICH variant's ctest with its own such summary,
# and, last, the skipped tests (exit 77, docs/testing.md "Skips") counted and grouped by the reason
# they printed, read from each ctest's JUnit file (the MPICH variant's on a line of its own). The
# exit status is the main ctest's, or, where that passed, the MPICH variant's (its build's or ctest's).
rm -f ctest-junit.xml
status=0
ctest --output-on-failure -j "$JOBS" --timeout 600 --output-junit "$PWD/ctest-junit.xml" "$@" || status=$?
if [[ $(sed -n 's/^CUDA_EMU_AVAILABLE:INTERNAL=//p' CMakeCache.txt) != ON ]]; then
  echo "tools/test.sh: WARNING: the cuda and cuda_emu suites were NOT built: $(sed -n 's/^CUDA_EMU_MISSING:INTERNAL=//p' CMakeCache.txt)"
fi
# summarize <junit file> <label>: the skipped tests counted and grouped by the reason they printed.
summarize() {
  python3 - "$1" "$2" <<'EOF' || echo "tools/test.sh: could not summarize skipped tests from $1"
import os, re, sys, xml.etree.ElementTree as ET
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
groups = {}  # reason -> test names
total = 0
for c in cases:
    total += 1
    if c.find("skipped") is None:
        continue
    lines = [l.strip() for l in (c.findtext("system-out") or "").splitlines() if l.strip()]
    # GoogleTest prints "<file>:<line>: Skipped" then the GTEST_SKIP message; scripts end with it.
    after = [b for a, b in zip(lines, lines[1:]) if re.search(r":\d+: Skipped$", a)]
    said = [l for l in lines if "skip" in l.lower() and not l.startswith("[")]
    reason = (after or said[-1:] or lines[-1:] or ["(no output)"])[0]
    groups.setdefault(reason, []).append(c.get("name").split("  #")[0])  # no "# GetParam() = ..."
def names(ns):
    if len(ns) <= 3:
        return ", ".join(ns)
    p = os.path.commonprefix(ns)
    return p[: max(p.rfind("."), p.rfind("_")) + 1] + "*"
parts = [f"{len(ns)} {r!r} ({names(ns)})" for r, ns in sorted(groups.items(), key=lambda g: -len(g[1]))]
n = sum(len(ns) for ns in groups.values())
print(f"tools/test.sh{sys.argv[2]}: {n} of {total} tests skipped" + (": " + "; ".join(parts) if parts else ""))
EOF
}
if ((MPICH && mpich_status == 0)); then
  echo "tools/test.sh: the MPICH variant: ctest -L mpich in $MPICH_BUILD"
  rm -f "$MPICH_BUILD/ctest-junit.xml"
  (cd "$MPICH_BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 -L mpich \
    --output-junit "$MPICH_BUILD/ctest-junit.xml") || mpich_status=$?
fi
summarize ctest-junit.xml ""
[[ $MPICH == 1 && -f $MPICH_BUILD/ctest-junit.xml ]] && summarize "$MPICH_BUILD/ctest-junit.xml" " (MPICH variant, $MPICH_BUILD)"
((status != 0)) || status=$mpich_status
exit "$status"
