#!/usr/bin/env bash
# tests/cuda/ptxas_spills.sh — every kernel of the CUDA backend compiles for sm_80 and sm_90 without
# spilling registers to local memory. Spills are invisible to every other test (the emulator runs
# the source, not the machine code) and cost a kernel its speed: the FlashAttention-2 kernels run at
# 224-255 registers a thread, where a change of a few lines can push ptxas over (docs/attention.md
# "Speed" lists two that did). Compiles each model/cuda/*.cu that defines a kernel, with the
# build's code-generation flags (model/cuda/CMakeLists.txt: -O3, C++20, -fmad=false for adamw.cu),
# to a cubin per target with `ptxas -v`, and reads each entry function's "N bytes spill stores, M
# bytes spill loads". Prints every kernel's registers and spills; fails naming those that spill.
#
# Usage: ptxas_spills.sh NVCC SOURCE_DIR. Exit 0 when no kernel spills, 1 naming those that do (or
# a compile that failed), 77 (skipped) without nvcc.
set -euo pipefail
NVCC=$1
SRC=$2
command -v "$NVCC" >/dev/null || { echo "ptxas_spills: no nvcc at $NVCC: skipped"; exit 77; }
kernels=0
spilling=()
for f in "$SRC"/model/cuda/*.cu; do
    grep -q "__global__" "$f" || continue
    extra=()
    [ "$(basename "$f")" = adamw.cu ] && extra=(-fmad=false)
    for arch in 80 90; do
        if ! log=$("$NVCC" -I"$SRC" -O3 -DNDEBUG -std=c++20 "${extra[@]}" \
                   --generate-code=arch=compute_$arch,code=sm_$arch -Xptxas -v -x cu -cubin -o /dev/null "$f" 2>&1); then
            echo "$log"
            echo "ptxas_spills: $f did not compile for sm_$arch"
            exit 1
        fi
        # ptxas -v: "Compiling entry function 'NAME' for 'sm_XX'", then "Function properties for
        # NAME", "N bytes stack frame, S bytes spill stores, L bytes spill loads", "Used R registers".
        while IFS=$'\t' read -r name stores loads regs; do
            kernels=$((kernels + 1))
            echo "sm_$arch $(basename "$f") $name: $regs registers, $stores / $loads bytes spill stores / loads"
            if [ "$stores" != 0 ] || [ "$loads" != 0 ]; then spilling+=("sm_$arch $name ($(basename "$f"))"); fi
        done < <(awk '
            /Compiling entry function/ { match($0, /function .[^'"'"']+/); name = substr($0, RSTART + 10, RLENGTH - 10) }
            /bytes spill stores/ { stores = $5; loads = $9 }
            /Used [0-9]+ registers/ && name != "" { print name "\t" stores "\t" loads "\t" $5; name = "" }
        ' <<<"$log")
    done
done
[ "$kernels" -gt 0 ] || { echo "ptxas_spills: no kernel found under $SRC/model/cuda"; exit 1; }
if [ "${#spilling[@]}" -gt 0 ]; then
    printf 'ptxas_spills: spills in %s\n' "${spilling[@]}"
    exit 1
fi
echo "ptxas_spills: $kernels kernels (sm_80 and sm_90), none spills"
