#!/usr/bin/env bash
# tests/parallel/tp_equivalence.sh — parallel.tp through the llmtrain binary (CPU backend, one
# OpenMP thread per rank, 6 steps of a 2-layer, 4-head model) against tp = 1 at the same global
# batch: tp 2 and tp 4 against one process; tp 2 x dp 2, tp 2 with ZeRO-1, 2 and 3 (dp 2) against
# dp 2; tp 2 x pp 2 against one process; tp 2 with gradient clipping on (the clip scale uses the
# TP-summed norm) against one process, norms compared too; tp 2 with the optimizer half offloaded
# against tp 2, bitwise; with sequence parallelism tp 2, tp 4 and tp 2 x pp 2 against one process. Tolerances: train/val losses 1e-5
# relative (measured up to 1.0e-7: the row-parallel matmuls' partial sums are added over the TP
# group, which reassociates fp32 sums of K = n_embd/tp or 4 n_embd/tp terms, ~1e-7 relative per
# step; gradient norms measured up to 1.5e-7); weights 1e-4 absolute after 6 AdamW steps (the
# c_attn key bias excepted as in zero_equivalence.sh): AdamW's update m/(sqrt(v)+eps) is
# scale-free, so a reassociation error relative to a gradient near zero (the key and value rows of
# c_attn, whose gradients nearly cancel over the softmax) moves an update by up to ~lr. Measured
# here up to 3.8e-6, and up to 4.5e-5 with 4 heads of 8 (n_embd 32), against a total movement of
# sum(lr) = 0.042 over the run; the other tensors within 1e-5.
# Every checkpoint of a tp run checks that the replicated tensors (LayerNorms, wpe, row-parallel
# biases) are bitwise equal on every TP rank, weights and AdamW moments (else it fails, and so
# does the run). Resharding: a tp 2 checkpoint resaved at tp 1 and tp 4, and a tp 1 checkpoint at
# tp 2, are bitwise the original (every loaded value saved again unchanged); the tp 2 run's step-3
# checkpoint resumed at tp 1 and tp 4 matches the unbroken one-process run within the tolerances.
# Also: a world that pp x tp does not divide is exit 2 naming parallel.tp; --dry-run per rank at tp
# against the real run's Allocator peak (at the end).
# Usage: tp_equivalence.sh <llmtrain> <zero_resave> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 RESAVE=$2 MPI=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
source "$(dirname "$0")/equivalence_lib.sh"

H4=(--set model.n_head=4 --set checkpoint.interval=3)  # 4 heads of 9 (n_embd 36): splits over tp 4
LT=1e-5 WT=1e-4
norms() {  # norms <reference> <run>: the train grad_norm columns within 1e-5 relative
    "$PY" - "$WORK/$1/losses.tsv" "$WORK/$2/losses.tsv" <<'PY'
import sys
rows = lambda f: [l.split('\t') for l in open(f).read().splitlines()[1:] if l.split('\t')[1] == 'train']
a, b = rows(sys.argv[1]), rows(sys.argv[2])
worst = max(abs(float(x[4]) - float(y[4])) / float(x[4]) for x, y in zip(a, b))
assert len(a) == len(b) == 6 and worst <= 1e-5, f'{sys.argv[2]}: grad norms {worst:.2e} relative apart'
print(f'{sys.argv[2]}: grad norms within {worst:.2e} relative')
PY
}
# A world that pp x tp does not divide: exit 2 naming parallel.tp, the run dir untouched; the same
# for --dry-run --world-size.
set +e
"$MPI" --oversubscribe -np 3 "$BIN" --set parallel.tp=2 --set "run.run_dir=\"$WORK/bad3\"" >"$WORK/bad3.log" 2>&1
code=$?
"$BIN" --dry-run --world-size 6 --set parallel.tp=4 >"$WORK/bad_dry.log" 2>&1
code_dry=$?
set -e
[ $code = 2 ] && [ ! -e "$WORK/bad3" ] &&
    grep -q "parallel.tp: expected parallel.pp x parallel.tp (1 x 2) to divide the number of ranks (3)" "$WORK/bad3.log" ||
    { echo "bad3: exit $code"; cat "$WORK/bad3.log"; exit 1; }
[ $code_dry = 2 ] && grep -q "parallel.tp: expected parallel.pp x parallel.tp (1 x 4) to divide --world-size 6" \
    "$WORK/bad_dry.log" || { echo "bad_dry: exit $code_dry"; cat "$WORK/bad_dry.log"; exit 1; }

run 1 ref "${H4[@]}"
run 2 tp2 "${H4[@]}" --set parallel.tp=2
compare ref tp2 $LT 0 $WT
norms ref tp2
grep -q "TP groups {0,1}" "$WORK/tp2.log" || { echo "tp2: no TP group in the start-up log"; exit 1; }
# The start-up summary counts the whole model's parameters and FLOPs per token (MFU), not one TP rank's.
flops() { grep -oE "[0-9,]+ parameters|[0-9.e+]+ training FLOPs per token" "$WORK/$1.log"; }
[ "$(flops ref)" = "$(flops tp2)" ] || { echo "tp2: parameters / FLOPs per token differ:"; flops ref; flops tp2; exit 1; }
run 4 tp4 "${H4[@]}" --set parallel.tp=4
compare ref tp4 $LT 0 $WT
norms ref tp4
run 4 tp2pp2 "${H4[@]}" --set parallel.tp=2 --set parallel.pp=2
compare ref tp2pp2 $LT 0 $WT
# Sequence parallelism (the residual stream and LayerNorms on 1/tp of the rows; their gradients
# summed over the TP group): tp 2, tp 4 and tp 2 x pp 2 against one process, same tolerances.
SP=(--set parallel.sequence_parallel=true)
run 2 tp2sp "${H4[@]}" "${SP[@]}" --set parallel.tp=2
compare ref tp2sp $LT 0 $WT
norms ref tp2sp
run 4 tp4sp "${H4[@]}" "${SP[@]}" --set parallel.tp=4
compare ref tp4sp $LT 0 $WT
run 4 tp2pp2sp "${H4[@]}" "${SP[@]}" --set parallel.tp=2 --set parallel.pp=2
compare ref tp2pp2sp $LT 0 $WT
run 1 ref_clip "${H4[@]}" --set training.grad_clip=0.5
run 2 tp2_clip "${H4[@]}" --set parallel.tp=2 --set training.grad_clip=0.5
compare ref_clip tp2_clip $LT 0 $WT
norms ref_clip tp2_clip
run 2 dp2 "${H4[@]}"
run 4 tp2dp2 "${H4[@]}" --set parallel.tp=2
compare dp2 tp2dp2 $LT 0 $WT
grep -q "x dp 2 = global_batch_size 4 " "$WORK/tp2dp2.log" || { echo "tp2dp2: global batch not 2 x dp 2"; exit 1; }
run 4 tp2z1 "${H4[@]}" --set parallel.tp=2 --set parallel.zero_stage=1
compare dp2 tp2z1 $LT 0 $WT
run 4 tp2z2 "${H4[@]}" --set parallel.tp=2 --set parallel.zero_stage=2
compare dp2 tp2z2 $LT 0 $WT
run 4 tp2z3 "${H4[@]}" --set parallel.tp=2 --set parallel.zero_stage=3
compare dp2 tp2z3 $LT 0 $WT
# The offloaded optimizer (half of each TP rank's shard on the host) against tp 2 without it: bitwise.
run 2 tp2_off "${H4[@]}" --set parallel.tp=2 --set 'optimizer.offload="cpu"' --set optimizer.offload_fraction=0.5 \
    --set optimizer.offload_chunk_mb=0.01
compare tp2 tp2_off 0

# Resharding: the tp 2 run's step-3 checkpoint loaded and saved again at tp 1 and tp 4; the
# one-process run's at tp 2.
resave() {  # resave <np> <from> <name> [--set ...]
    local np=$1 from=$2 name=$3
    shift 3
    "$MPI" --oversubscribe -np "$np" "$RESAVE" "$WORK/$from/checkpoints/step_3" --set model.n_layer=2 \
        --set model.n_head=4 --set model.n_embd=36 --set model.seq_len=16 --set "model.vocab_size=$VOCAB" \
        --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\"" --set metrics.enabled=false \
        --set training.micro_batch_size=2 --set "run.run_dir=\"$WORK/$name\"" "$@" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: resave $name"; cat "$WORK/$name.log"; exit 1; }
}
resave 1 tp2 tp2_to_1
same tp2 tp2_to_1
resave 4 tp2 tp2_to_4 --set parallel.tp=4
same tp2 tp2_to_4
resave 2 ref ref_to_tp2 --set parallel.tp=2
same ref ref_to_tp2
# Training goes on from the tp 2 step-3 checkpoint at tp 1 and tp 4 as the unbroken run did.
CK=(--set "checkpoint.resume=\"$WORK/tp2/checkpoints/step_3\"")
run 1 tp2_then_1 "${H4[@]}" "${CK[@]}"
compare ref tp2_then_1 $LT 3 $WT
run 4 tp2_then_4 "${H4[@]}" "${CK[@]}" --set parallel.tp=4
compare ref tp2_then_4 $LT 3 $WT
# --dry-run --world-size N at tp 2 (the row of the run's ZeRO stage, device total) against the
# Allocator's peak of every rank of the real run, 2 steps of a wider model (n_embd 128, seq_len 64:
# ~5 MiB per rank, so the report's 0.1 MiB resolution is 1%), within 2%: tp 2 alone, and tp 2 x dp 2
# at ZeRO-1.
mem() {  # mem <np> <name> [--set ...]
    local np=$1 name=$2
    shift 2
    local S=(--set model.n_layer=2 --set model.n_head=4 --set model.n_embd=128 --set model.seq_len=64
             --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\""
             --set metrics.enabled=false --set training.micro_batch_size=2 --set run.eval_interval=0
             --set run.sample_interval=0 --set checkpoint.interval=0 --set run.max_steps=2 "$@")
    "$BIN" "${S[@]}" --dry-run --world-size "$np" >"$WORK/$name.dry" 2>&1 || { echo "FAILED: dry $name"; cat "$WORK/$name.dry"; exit 1; }
    "$MPI" --oversubscribe -np "$np" "$BIN" "${S[@]}" --set "run.run_dir=\"$WORK/$name\"" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: $name"; cat "$WORK/$name.log"; exit 1; }
    "$PY" - "$WORK/$name.dry" "$WORK/$name.log" "$np" "${ZERO:-0}" <<'PY'
import re, sys
dry, log, np_, zero = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3]), int(sys.argv[4])
row = [l.split() for l in dry.splitlines() if re.match(r'^ +%d +[0-9]' % zero, l)][0]
predicted = float(row[row.index('|') - 1])
peaks = [float(x) for x in re.findall(r'rank [0-9]+ \(stage [0-9]+\) ([0-9.]+)', log.split('peak device memory')[1].splitlines()[0])]
assert len(peaks) == np_, f'{sys.argv[2]}: {len(peaks)} peaks'
worst = max(abs(p - predicted) / predicted for p in peaks)
assert worst <= 0.02, f'{sys.argv[2]}: dry run {predicted} MiB, peaks {peaks}'
print(f'{sys.argv[2]}: --dry-run {predicted} MiB per rank, peaks {peaks} (within {100 * worst:.1f}%)')
PY
}
mem 2 mem_tp2 --set parallel.tp=2
ZERO=1 mem 4 mem_tp2z1 --set parallel.tp=2 --set parallel.zero_stage=1
mem 2 mem_tp2sp --set parallel.tp=2 --set parallel.sequence_parallel=true
# Llama (grouped-query attention: query and key/value heads split over tp, gate|up column- and
# down row-parallel, untied head vocab-parallel): tp 2, tp 2 with sequence parallelism and tp 2 x pp 2
# against one process, same tolerances; a tp 2 checkpoint resaved at tp 1 bitwise; --dry-run at tp 2
# against the Allocator's peak within 2%.
LU=("${LLAMA[@]}" --set model.tie_embeddings=false --set checkpoint.interval=3)
run 1 llama_ref "${LU[@]}"
run 2 llama_tp2 "${LU[@]}" --set parallel.tp=2
compare llama_ref llama_tp2 $LT 0 $WT
norms llama_ref llama_tp2
run 2 llama_tp2sp "${LU[@]}" "${SP[@]}" --set parallel.tp=2
compare llama_ref llama_tp2sp $LT 0 $WT
run 4 llama_tp2pp2 "${LU[@]}" --set parallel.tp=2 --set parallel.pp=2
compare llama_ref llama_tp2pp2 $LT 0 $WT
resave 1 llama_tp2 llama_tp2_to_1 "${LU[@]}"
same llama_tp2 llama_tp2_to_1
mem 2 mem_llama_tp2 "${LLAMA[@]}" --set model.n_embd=128 --set model.intermediate_size=0 --set parallel.tp=2
echo "tp_equivalence: all comparisons passed"
