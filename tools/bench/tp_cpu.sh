#!/usr/bin/env bash
# tools/bench/tp_cpu.sh — step time of tensor parallelism (parallel.tp = 2) against data parallelism
# (dp 2) at the same global batch on the CPU backend, world 2 (mpirun, one OpenMP thread per rank),
# measured in one run so the ratio compares like with like on a shared machine (issue #23's figure).
# tp 2 runs the config's micro_batch_size B on both ranks (each half of every layer, 4 all-reduces
# of (B,T,C) per layer and step); dp 2 runs B/2 per rank (one gradient all-reduce per step). Each
# layout trains STEPS steps, ROUNDS times (default 3, interleaved: the machine's speed drifts); its
# figure is the best round's median of the log's per-step tok/s after the first two lines.
#
# Usage: [ROUNDS=3] tools/bench/tp_cpu.sh <llmtrain> <config.toml> [STEPS] [extra --set overrides...]
# e.g.   tools/bench/tp_cpu.sh build/app/llmtrain configs/tiny.toml 20 --set 'data.train="..."' ...
set -euo pipefail
BIN=$1 CONFIG=$2 STEPS=${3:-20}
shift $(( $# >= 3 ? 3 : $# ))
EXTRA=("$@")
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
B=$("$BIN" --config "$CONFIG" "${EXTRA[@]}" --print-config | awk -F' = ' '$1 == "micro_batch_size" { print $2 }')
(( B % 2 == 0 )) || { echo "tp_cpu.sh: micro_batch_size $B must be even (dp 2 runs B/2 per rank)" >&2; exit 2; }

run() {  # run <name> <round> [--set ...]: prints the median tokens/s of the log lines after the first two
    local rd=$WORK/$1_$2
    shift 2
    mpirun --oversubscribe -np 2 "$BIN" --config "$CONFIG" --set "run.run_dir=\"$rd\"" --set "run.max_steps=$STEPS" \
        --set run.log_interval=1 --set run.eval_interval=0 --set run.sample_interval=0 --set checkpoint.interval=0 \
        --set metrics.enabled=false --set 'checkpoint.resume="none"' "${EXTRA[@]}" "$@" >"$rd.log" 2>&1 ||
        { cat "$rd.log" >&2; exit 1; }
    grep -o '[0-9,]* tok/s' "$rd.log" | tail -n +3 | tr -d ', tok/s' | sort -n |
        awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

best_tp=0 best_dp=0
for ((round = 1; round <= ${ROUNDS:-3}; round++)); do
    t=$(run tp2 $round --set parallel.tp=2 --set training.micro_batch_size=$B)
    best_tp=$(awk -v a=$best_tp -v b="$t" 'BEGIN { print (b > a) ? b : a }')
    t=$(run dp2 $round --set training.micro_batch_size=$((B / 2)))
    best_dp=$(awk -v a=$best_dp -v b="$t" 'BEGIN { print (b > a) ? b : a }')
done
echo "config $CONFIG, world 2, global batch $B sequences, $STEPS steps, best of ${ROUNDS:-3} rounds of the median tokens/s:"
awk -v t=$best_tp -v d=$best_dp 'BEGIN { printf "dp 2 (micro_batch_size %d): %8.0f tokens/s\ntp 2 (micro_batch_size %d): %8.0f tokens/s  step time %.3fx dp 2\n", '$((B / 2))', d, '$B', t, d / t }'
