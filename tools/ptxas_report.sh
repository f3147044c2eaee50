#!/usr/bin/env bash
# tools/ptxas_report.sh — the compiler launcher of the llmtrain_cuda target (model/cuda/CMakeLists.txt):
# runs the build's own nvcc command with `-Xptxas -v` added and keeps ptxas' report (per kernel and
# target: registers, stack frame, spill stores / loads) in <object>.ptxas.txt beside the object, so
# the ctest cuda_ptxas_spills (tests/cuda/ptxas_spills.sh) reads the machine code the build made
# instead of compiling every kernel a second time (95 s of the suite, docs/testing.md "Time budget").
# The report stays out of the build's output; anything else nvcc prints (warnings, errors) is passed
# on. Usage (CMake prepends it): ptxas_report.sh NVCC ARGS... ; exits with nvcc's status.
set -uo pipefail
obj=
prev=
for a in "$@"; do
    [ "$prev" = -o ] && obj=$a
    prev=$a
done
if [ -z "$obj" ]; then exec "$@"; fi  # not an object compile (CMake's probes): run as given
"$@" -Xptxas -v 2>"$obj.ptxas.tmp"
rc=$?
grep -Ev "^ptxas info *:|^ +[0-9]+ bytes stack frame" "$obj.ptxas.tmp" >&2
# touched: ptxas wrote it before the host compile finished the object, and the test checks it is not older
if [ $rc = 0 ]; then mv "$obj.ptxas.tmp" "$obj.ptxas.txt" && touch "$obj.ptxas.txt"; else rm -f "$obj.ptxas.tmp" "$obj.ptxas.txt"; fi
exit $rc
