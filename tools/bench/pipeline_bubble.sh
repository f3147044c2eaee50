#!/usr/bin/env bash
# tools/bench/pipeline_bubble.sh — the pipeline's bubble measured from run.trace against the 1F1B
# formula (P - 1)/(m + P - 1) (Narayanan et al. 2021; docs/reference.md "Pipeline: 1F1B").
# Trains a small GPT-2 (n_layer = 2P, equal stages by layers_per_stage) on the tiny dataset with pp
# = P, m = grad_accum_steps, traces steps 3-4 on every rank, and prints per stage the idle fraction
# of the pipeline's makespan (first op start to last op end over all stages, per step, averaged).
# The formula assumes equal stages with free transfers; on a machine with fewer cores than ranks the
# stages share cores, so read the figures as a check of the schedule's shape, not of the hardware.
# Usage: pipeline_bubble.sh <build dir> [P (default 2)] [m values (default "1 2 4 8")]
set -euo pipefail
BUILD=$1 P=${2:-2} MS=${3:-1 2 4 8}
DATA=$BUILD/tests/app/tiny_data
[ -f "$DATA/train.h5" ] || "$BUILD/tests/app/make_tiny_dataset" "$DATA" >/dev/null
VOCAB=$(cat "$DATA/vocab_size.txt")
WORK=$(mktemp -d)
LAYERS=$(python3 -c "print('[' + ', '.join(['2'] * $P) + ']')")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
echo "pipeline bubble, pp $P, 1F1B, n_layer $((2 * P)) n_embd 128, micro-batch 4 x 64 tokens; idle fraction per stage:"
for m in $MS; do
    mpirun --oversubscribe -np "$P" "$BUILD/app/llmtrain" --set model.n_layer=$((2 * P)) --set model.n_embd=128 \
        --set model.n_head=4 --set model.seq_len=64 --set "model.vocab_size=$VOCAB" \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/m$m\"" \
        --set metrics.enabled=false --set training.micro_batch_size=4 --set run.max_steps=4 --set run.eval_interval=0 \
        --set run.sample_interval=0 --set checkpoint.interval=0 --set parallel.pp=$P \
        --set "pipeline.layers_per_stage=$LAYERS" --set training.grad_accum_steps=$m --set 'run.trace=[3, 4]' \
        >"$WORK/m$m.log" 2>&1 || { echo "m=$m: llmtrain failed"; tail -5 "$WORK/m$m.log"; exit 1; }
    /usr/bin/python3 - "$WORK/m$m/trace" "$P" "$m" <<'PY'
import json, sys
d, P, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ops = {}  # (step, stage) -> [(start, end)]
for r in range(P):
    for e in json.load(open(f'{d}/rank{r}.json'))['traceEvents']:
        if e['ph'] == 'X' and e['name'][0] in 'FB' and e['name'][1:].isdigit():
            ops.setdefault((e['args']['step'], r), []).append((e['ts'], e['ts'] + e['dur']))
idle = [0.0] * P
steps = sorted({s for s, _ in ops})
for s in steps:
    t0 = min(a for r in range(P) for a, _ in ops[(s, r)]); t1 = max(b for r in range(P) for _, b in ops[(s, r)])
    for r in range(P):
        idle[r] += (1 - sum(b - a for a, b in ops[(s, r)]) / (t1 - t0)) / len(steps)
print(f'  m = {m:2d}: measured ' + ' '.join(f'{x:.3f}' for x in idle) +
      f' | formula (P-1)/(m+P-1) = {(P - 1) / (m + P - 1):.3f}')
PY
done
rm -rf "$WORK"
