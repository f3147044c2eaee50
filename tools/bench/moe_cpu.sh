#!/usr/bin/env bash
# tools/bench/moe_cpu.sh — tokens/s and MFU of the tiny mixture of experts against the dense Llama of
# the same active parameters (configs/moe-tiny.toml against configs/llama-tiny.toml, issue 45's
# table), on the CPU backend with one rank, measured in one run so the ratio compares like with like
# on a shared machine. The rounds interleave the two configs (dense, MoE, dense, MoE, ...), since a
# shared machine's speed drifts by 2x over minutes; each config's figure is the best round's median
# of the log's per-step tok/s and MFU (train-step time only: eval, samples and checkpoints are off),
# skipping the first two log lines (start-up). MFU counts active FLOPs (docs/model.md "Mixture of experts").
#
# Usage: [ROUNDS=3] tools/bench/moe_cpu.sh <llmtrain> <data dir with train.h5 and val.h5> [STEPS] [extra --set overrides...]
# e.g.   tools/bench/moe_cpu.sh build/app/llmtrain data/brown 40
set -euo pipefail
BIN=$1 DATA=$2 STEPS=${3:-40}
shift $(( $# >= 3 ? 3 : $# ))
EXTRA=("$@")
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run() {  # run <config name> <round>: prints "<median tok/s> <median MFU %>" of the log lines after the second
    local rd=$WORK/$1_$2
    "$BIN" --config "$HERE/configs/$1.toml" --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" \
        --set "run.run_dir=\"$rd\"" --set "run.max_steps=$STEPS" --set run.log_interval=1 --set run.eval_interval=0 \
        --set run.sample_interval=0 --set checkpoint.interval=0 --set metrics.enabled=false \
        --set 'checkpoint.resume="none"' "${EXTRA[@]}" >"$rd.log" 2>&1 || { cat "$rd.log" >&2; exit 1; }
    local med='{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
    local tps mfu
    tps=$(grep -o '[0-9,]* tok/s' "$rd.log" | tail -n +3 | tr -d ', tok/s' | sort -n | awk "$med")
    mfu=$(grep -o 'MFU [0-9.]*%' "$rd.log" | tail -n +3 | tr -d 'MFU %' | sort -g | awk "$med")
    echo "$tps $mfu"
}

declare -A tps mfu
ratios=()
for ((round = 1; round <= ${ROUNDS:-3}; round++)); do
    declare -A this
    for c in llama-tiny moe-tiny; do
        read -r t m < <(run $c $round)
        this[$c]=$t
        if awk -v a="${tps[$c]:-0}" -v b="$t" 'BEGIN { exit !(b > a) }'; then tps[$c]=$t mfu[$c]=$m; fi  # best round
    done
    ratios+=("$(awk -v a="${this[moe-tiny]}" -v b="${this[llama-tiny]}" 'BEGIN { printf "%.3f", a / b }')")
done
echo "one rank, OMP_NUM_THREADS=$OMP_NUM_THREADS, $STEPS steps, best of ${ROUNDS:-3} interleaved rounds of the median:"
for c in llama-tiny moe-tiny; do
    awk -v c="$c" -v t="${tps[$c]}" -v m="${mfu[$c]}" -v d="${tps[llama-tiny]}" \
        'BEGIN { printf "%-10s %8.0f tokens/s  MFU %5.1f%%  tokens/s %.3fx the dense model\n", c, t, m, t / d }'
done
# Each round's MoE run follows its dense run within a minute: their ratio sees the least drift.
echo "moe-tiny / llama-tiny tokens/s by round: ${ratios[*]}; median $(printf '%s\n' "${ratios[@]}" | sort -g |
    awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
