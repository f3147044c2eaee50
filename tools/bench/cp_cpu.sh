#!/usr/bin/env bash
# tools/bench/cp_cpu.sh — context parallelism (parallel.cp) on the CPU backend at a long window:
# tokens/s and every rank's peak memory at cp 1, 2 and 4 (cp ranks under mpirun, one OpenMP thread
# each), measured in one run so the ratios compare like with like on a shared machine. Each layout
# trains STEPS steps of one window per step (micro_batch_size 1); its tokens/s is the median of the
# log's per-step figures after the first; the peak is the log's "peak device memory" of each rank
# (the Allocator's high-water mark: parameters, gradients, optimizer, activations, workspace).
# On a machine with fewer cores than ranks, cp 4 shares them (oversubscribed): its tokens/s is a
# lower bound; the memory is what a rank needs wherever it runs.
#
# Usage: tools/bench/cp_cpu.sh <llmtrain> <config.toml> [T] [STEPS] [extra --set overrides...]
# e.g.   tools/bench/cp_cpu.sh build/app/llmtrain configs/llama-tiny.toml 8192 3 --set 'data.train="..."' ...
set -euo pipefail
BIN=$1 CONFIG=$2 T=${3:-8192} STEPS=${4:-3}
shift $(( $# >= 4 ? 4 : $# ))
EXTRA=("$@")
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "config $CONFIG, seq_len $T, micro_batch_size 1, $STEPS steps, $(getconf _NPROCESSORS_ONLN) cores, one thread per rank:"
printf '%-4s %12s %10s  %s\n' cp "tokens/s" "vs cp 1" "peak MiB per rank"
base=
for cp in 1 2 4; do
    rd=$WORK/cp$cp
    mpirun --oversubscribe -np $cp "$BIN" --config "$CONFIG" --set "run.run_dir=\"$rd\"" --set "run.max_steps=$STEPS" \
        --set model.seq_len=$T --set training.micro_batch_size=1 --set training.grad_accum_steps=1 \
        --set training.global_batch_size=0 --set parallel.cp=$cp --set run.log_interval=1 --set run.eval_interval=0 \
        --set run.sample_interval=0 --set checkpoint.interval=0 --set checkpoint.at_end=false \
        --set metrics.enabled=false --set 'checkpoint.resume="none"' "${EXTRA[@]}" >"$rd.log" 2>&1 ||
        { cat "$rd.log" >&2; exit 1; }
    tps=$(grep -o '[0-9,]* tok/s' "$rd.log" | tail -n +2 | tr -d ', tok/s' | sort -n |
        awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    peaks=$(grep -m1 'peak device memory' "$rd.log" | grep -oE 'stage [0-9]+\) [0-9.]+' |
        awk '{ printf "%s%s", (NR > 1 ? " " : ""), $3 }')
    base=${base:-$tps}
    printf '%-4s %12s %9.2fx  %s\n' $cp "$tps" "$(awk -v a="$tps" -v b="$base" 'BEGIN { print a / b }')" "$peaks"
done
