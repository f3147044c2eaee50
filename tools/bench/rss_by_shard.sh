#!/usr/bin/env bash
# tools/bench/rss_by_shard.sh — per-rank peak RSS at start and at resume of GPT-2 124M (configs/gpt2-124m.toml)
# on the CPU backend with ZeRO-3 at 1, 2 and 4 ranks: start and resume by shard (docs/checkpoints.md
# "By shard") must make both fall with the ranks.
#
# Each world size runs twice: one step from scratch with a checkpoint at the end, then one more step
# resumed from it. The trainer logs "memory: peak RSS at start ..." (VmHWM after the init and the
# checkpoint snapshot's reserve) and "memory: peak RSS at resume ..." (VmHWM reset before the read:
# the resident state plus the resume's own peak) for every rank; the script prints the largest rank's
# value per world size and its ratio to 1 rank. The model is GPT-2 124M with model.seq_len 64 (wpe
# 64 rows: 123.7M parameters) and micro-batch 1 so that a CPU step takes seconds; fp32, one thread per rank.
# Usage: rss_by_shard.sh <llmtrain> <data_dir with train.h5, val.h5, vocab_size.txt> [mpiexec] [work_dir]
#   data: e.g. build/tests/app/tiny_data (make_tiny_dataset <dir>, tests/app/make_tiny_dataset.cpp).
# Environment: RANKS (default "1 2 4"), EXTRA (more --set arguments, e.g. a smaller model),
# MAX_RATIO (fail unless both peaks at the most ranks are below MAX_RATIO x those at 1 rank:
# tests/parallel/CMakeLists.txt's parallel_rss_by_shard).
set -euo pipefail
BIN=$1 DATA=$2 MPI=${3:-mpirun} WORK=${4:-/tmp/rss_by_shard}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$WORK" && mkdir -p "$WORK"
common=(--config "$ROOT/configs/gpt2-124m.toml" --set 'run.backend="cpu"' --set 'training.precision="fp32"'
        --set model.seq_len=64 --set training.micro_batch_size=1 --set training.global_batch_size=4
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" --set metrics.enabled=false
        --set run.eval_interval=0 --set run.sample_interval=0 --set run.log_interval=1
        --set checkpoint.interval=0 --set checkpoint.at_end=true --set parallel.zero_stage=3)
read -r -a extra <<<"${EXTRA:-}"
read -r -a ranks <<<"${RANKS:-1 2 4}"
top=${ranks[-1]}

# largest <log> <at>: the largest rank's MiB on the "memory: peak RSS <at>" line.
largest() { grep "memory: peak RSS $2" "$1" | grep -o 'rank [0-9]* [0-9.]*' | awk '{ if ($3 > m) m = $3 } END { print m }'; }

declare -A start resume
for np in "${ranks[@]}"; do
    for phase in 1 2; do  # 1: from scratch, checkpoint at the end; 2: resumed from it
        "$MPI" --oversubscribe -np "$np" "$BIN" "${common[@]}" "${extra[@]}" --set "run.run_dir=\"$WORK/np$np\"" \
            --set run.max_steps=$phase >"$WORK/np$np.$phase.log" 2>&1 ||
            { echo "FAILED: $np ranks, run $phase"; tail -20 "$WORK/np$np.$phase.log"; exit 1; }
    done
    start[$np]=$(largest "$WORK/np$np.1.log" "at start")
    resume[$np]=$(largest "$WORK/np$np.2.log" "at resume")
    grep -q "resume: from" "$WORK/np$np.2.log" || { echo "FAILED: $np ranks did not resume"; exit 1; }
done
echo "GPT-2 124M (seq_len 64${EXTRA:+; $EXTRA}), CPU fp32, ZeRO-3: per-rank peak RSS (MiB, the largest rank)"
printf "%6s %12s %12s %14s %15s\n" ranks start resume "start / 1 rank" "resume / 1 rank"
for np in "${ranks[@]}"; do
    printf "%6d %12.1f %12.1f %14.2f %15.2f\n" "$np" "${start[$np]}" "${resume[$np]}" \
        "$(echo "${start[$np]} / ${start[1]}" | bc -l)" "$(echo "${resume[$np]} / ${resume[1]}" | bc -l)"
done
# below <at> <MiB at the most ranks> <MiB at 1 rank>: MAX_RATIO's check.
below() {
    if [ "$(echo "$2 >= $MAX_RATIO * $3" | bc -l)" = 1 ]; then
        echo "FAILED: peak RSS at $1 on $top ranks ($2 MiB) is not below $MAX_RATIO x 1 rank's ($3 MiB)"
        exit 1
    fi
}
if [ -n "${MAX_RATIO:-}" ]; then
    below start "${start[$top]}" "${start[1]}"
    below resume "${resume[$top]}" "${resume[1]}"
fi
