#!/usr/bin/env bash
# tests/cuda/ptxas_spills.sh — every kernel of the CUDA backend, as the build compiled it for sm_80
# and sm_90, spills no register to local memory. Spills are invisible to every other test (the
# emulator runs the source, not the machine code) and cost a kernel its speed: the FlashAttention-2
# kernels run at 224-255 registers a thread, where a change of a few lines can push ptxas over
# (docs/attention.md "Speed" lists two that did). The build's compiler launcher (tools/ptxas_report.sh)
# keeps ptxas' `-v` report of each object of llmtrain_cuda in <object>.ptxas.txt; this reads each
# entry function's "N bytes spill stores, M bytes spill loads". Prints every kernel's registers and
# spills; fails naming those that spill, and fails when an object has no report (built without the
# launcher: rebuild llmtrain_cuda) or when no kernel was found for either target.
#
# Usage: ptxas_spills.sh OBJECTS (the target's object files, ':'-separated). Exit 0 when no kernel
# spills, 1 otherwise.
set -euo pipefail
IFS=: read -ra objects <<<"${1:?usage: ptxas_spills.sh OBJECTS}"
declare -A per_arch=()
spilling=()
for o in "${objects[@]}"; do
    r=$o.ptxas.txt
    [ -f "$r" ] || { echo "ptxas_spills: no ptxas report $r (rebuild llmtrain_cuda: tools/ptxas_report.sh writes it)"; exit 1; }
    [ ! "$o" -nt "$r" ] || { echo "ptxas_spills: $r is older than its object (rebuild llmtrain_cuda)"; exit 1; }
    src=$(basename "$o" .o)
    # ptxas -v: "Compiling entry function 'NAME' for 'sm_XX'", then "Function properties for NAME",
    # "N bytes stack frame, S bytes spill stores, L bytes spill loads", "Used R registers".
    while IFS=$'\t' read -r arch name stores loads regs; do
        per_arch[$arch]=$((${per_arch[$arch]:-0} + 1))
        echo "$arch $src $name: $regs registers, $stores / $loads bytes spill stores / loads"
        if [ "$stores" != 0 ] || [ "$loads" != 0 ]; then spilling+=("$arch $name ($src)"); fi
    done < <(awk '
        /Compiling entry function/ {
            match($0, /function .[^'"'"']+/); name = substr($0, RSTART + 10, RLENGTH - 10)
            match($0, /for .sm_[0-9]+/); arch = substr($0, RSTART + 5, RLENGTH - 5)
        }
        /bytes spill stores/ { stores = $5; loads = $9 }
        /Used [0-9]+ registers/ && name != "" { print arch "\t" name "\t" stores "\t" loads "\t" $5; name = "" }
    ' "$r")
done
for arch in sm_80 sm_90; do
    [ "${per_arch[$arch]:-0}" -gt 0 ] || { echo "ptxas_spills: no kernel compiled for $arch in the reports"; exit 1; }
done
if [ "${#spilling[@]}" -gt 0 ]; then
    printf 'ptxas_spills: spills in %s\n' "${spilling[@]}"
    exit 1
fi
echo "ptxas_spills: ${per_arch[sm_80]} kernels for sm_80 and ${per_arch[sm_90]} for sm_90, none spills"
