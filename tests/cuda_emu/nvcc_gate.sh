#!/usr/bin/env bash
# tests/cuda_emu/nvcc_gate.sh — the compile gate: every .cu and .cuh under model/cuda and
# tests/cuda_emu/kernels must compile with the real nvcc for sm_80 and sm_90 (compile only: no GPU
# needed). The emulator compiles the same files with g++; this keeps them honest CUDA.
# The .cu files that the build itself compiled with nvcc for both targets (the llmtrain_cuda
# target: model/cuda/CMakeLists.txt) are not compiled a second time: the build was the check. What
# is left is each header on its own, the emulator's example kernels, and any .cu the build skipped.
# Usage: nvcc_gate.sh <nvcc> <repo root> [<built .cu file names under model/cuda, ':'-separated>].
# Exit 77 (skipped) without nvcc.
set -uo pipefail
NVCC=${1:-}
ROOT=${2:?usage: nvcc_gate.sh <nvcc> <repo root> [built]}
BUILT=:  # the built files' base names (the target may list them with a directory), ':'-delimited
IFS=: read -ra built_list <<<"${3:-}"
for b in "${built_list[@]}"; do BUILT+="$(basename "$b"):"; done
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
  echo "nvcc_gate: nvcc not found: skipped"
  exit 77
fi
cd "$ROOT"
mapfile -t files < <(find model/cuda tests/cuda_emu/kernels \( -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "nvcc_gate: no CUDA sources found"
  exit 1
fi
# C++20 when this nvcc accepts it, else C++17.
STD=-std=c++20
echo '' | "$NVCC" $STD -x cu -c -o /dev/null - 2>/dev/null || STD=-std=c++17
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for f in "${files[@]}"; do
  if [[ $f == model/cuda/*.cu && $BUILT == *":$(basename "$f"):"* ]]; then
    echo "nvcc_gate: built $f (by the build's nvcc, sm_80 and sm_90)"
    continue
  fi
  # A header is compiled on its own too (through a one-line .cu): it must include what it uses. It
  # goes through nvcc's front end (EDG, host and device code) and cicc to PTX for each target, not
  # through ptxas and the host g++: a header alone instantiates no kernel (its instantiations went
  # through ptxas in the built .cu files that include it), and the emulator's build compiles every
  # header with g++. One target, compute_90 (1.6 s of CPU a header against 6.1 s for a full compile
  # of both): what a header holds under `__CUDA_ARCH__ < 900` went through both targets in the built
  # .cu files that include it. A .cu is compiled to machine code for both targets.
  ok=1
  case "$f" in
    *.cuh) echo "#include \"$f\"" > "$tmp/header.cu"
           "$NVCC" $STD -I"$ROOT" -arch=compute_90 -ptx "$tmp/header.cu" -o /dev/null || ok=0 ;;
    *) "$NVCC" $STD -I"$ROOT" -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
         -c "$f" -o /dev/null || ok=0 ;;
  esac
  if ((ok)); then
    echo "nvcc_gate: ok   $f"
  else
    echo "nvcc_gate: FAIL $f"
    failed=1
  fi
done
exit $failed
