#!/usr/bin/env bash
# tools/bench/zero_cpu.sh — step time of ZeRO-1/2/3 over plain data parallelism on the CPU backend,
# world 2 (mpirun, one OpenMP thread per rank), measured in one run so the ratios compare like with
# like on a shared machine. Goals (issue "ZeRO-1/2/3"): ZeRO-1/2 <= 1.1x DP, ZeRO-3 <= 1.3x.
# Each stage trains STEPS steps of the given config, ROUNDS times (default 3; rounds interleaved,
# since the shared machine's speed drifts by 2x over minutes); its figure is the best round's median of the log's per-step tok/s (train-step time only: eval, samples and
# checkpoints are excluded), skipping the first two lines (start-up).
#
# Usage: [ROUNDS=3] tools/bench/zero_cpu.sh <llmtrain> <config.toml> [STEPS] [extra --set overrides...]
# e.g.   tools/bench/zero_cpu.sh build/app/llmtrain configs/tiny.toml 30
set -euo pipefail
BIN=$1 CONFIG=$2 STEPS=${3:-30}
shift $(( $# >= 3 ? 3 : $# ))
EXTRA=("$@")
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run() {  # run <stage> <round>: prints the median tokens/s of the log lines after the first
    local st=$1 rd=$WORK/z$1_$2
    mpirun --oversubscribe -np 2 "$BIN" --config "$CONFIG" --set "parallel.zero_stage=$st" \
        --set "run.run_dir=\"$rd\"" --set "run.max_steps=$STEPS" --set run.log_interval=1 --set run.eval_interval=0 \
        --set run.sample_interval=0 --set checkpoint.interval=0 --set metrics.enabled=false \
        --set 'checkpoint.resume="none"' "${EXTRA[@]}" >"$rd.log" 2>&1 || { cat "$rd.log" >&2; exit 1; }
    grep -o '[0-9,]* tok/s' "$rd.log" | tail -n +3 | tr -d ', tok/s' | sort -n |
        awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

declare -A tps
for ((round = 1; round <= ${ROUNDS:-3}; round++)); do
    for st in 0 1 2 3; do
        t=$(run $st $round)
        tps[$st]=$(awk -v a="${tps[$st]:-0}" -v b="$t" 'BEGIN { print (b > a) ? b : a }')  # best of the rounds
    done
done
echo "config $CONFIG, world 2, $STEPS steps, best of ${ROUNDS:-3} rounds of the median tokens/s:"
for st in 0 1 2 3; do
    awk -v s="$st" -v t="${tps[$st]}" -v d="${tps[0]}" \
        'BEGIN { printf "zero_stage %d: %8.0f tokens/s  step time %.3fx plain DP\n", s, t, d / t }'
done
