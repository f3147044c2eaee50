#!/usr/bin/env bash
# tests/parallel/zero_reshard.sh — a checkpoint written under one world size / ZeRO stage / group
# layout loads under another, and every loaded value equals the saved one: the resaved checkpoint's
# weights (model.h5) and AdamW moments (optim_*.h5 pieces reassembled by tensor and offset) are
# compared bitwise with the original's. Cases (the issue's): 2 -> 3 ranks, 4 -> 2, ZeRO-3 -> ZeRO-1,
# sub-DP 2x2 ZeRO-2 -> plain ZeRO-2 on 4, and ZeRO-1 on 3 -> one process at stage 0; and across
# pipelines (4 layers): pp 2 -> one process, one process -> pp 4, pp 2 x dp 2 ZeRO-1 -> pp 4.
# The data stream across layouts (the loader saves global samples consumed, data/loader.hpp): a
# 4-rank checkpoint (ZeRO-3, 2 groups of 2, micro_batch_size 2, global batch 8) taken at step 3 of
# 6 and resumed on 4 ranks alike is bitwise the unbroken 4-rank run (the same sums); resumed on 1
# rank (grad_accum_steps 4, and micro_batch_size 4 x 2), on 2 ranks (ZeRO-1) and at pp 2 it matches
# the unbroken 1-rank run within 1e-6 (losses relative, weights absolute; the c_attn key bias
# excepted, see zero_equivalence.sh). Why not bitwise: the step-3 weights come from the 4-rank run,
# whose ZeRO-3 sums (r0 + r1) + (r2 + r3) reassociate the 1-rank micro-batch order (and 2 ranks, pp
# and B 4 sum in yet other orders): fp32 rounding of about 1e-7 (measured up to 1.8e-7 on the weights,
# 1e-7 on the losses); a resume that reads other windows is off by 0.5-0.8% in the loss. An
# older checkpoint ([loader] epoch, batch: each rank's micro-batch index) resumes bitwise in the
# layout it was written in and is refused, naming the layout, in another.
# Usage: zero_reshard.sh <llmtrain> <zero_resave> <mpiexec> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 RESAVE=$2 MPI=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
PY=${LLMTRAIN_PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
common=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=36 --set model.seq_len=16
        --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\""
        --set metrics.enabled=false --set training.micro_batch_size=2 --set run.eval_interval=0
        --set run.sample_interval=0 --set checkpoint.interval=0)

source "$(dirname "$0")/equivalence_lib.sh"  # run, compare, same

train() {  # train <np> <name> [--set ...]: 3 steps, checkpoint at the end
    local np=$1 name=$2
    shift 2
    "$MPI" --oversubscribe -np "$np" "$BIN" "${common[@]}" --set "run.run_dir=\"$WORK/$name\"" --set run.max_steps=3 \
        "$@" >"$WORK/$name.log" 2>&1 || { echo "FAILED: train $name"; cat "$WORK/$name.log"; exit 1; }
}
resave() {  # resave <np> <from> <name> [--set ...]
    local np=$1 from=$2 name=$3
    shift 3
    "$MPI" --oversubscribe -np "$np" "$RESAVE" "$WORK/$from/checkpoints/step_3" "${common[@]}" \
        --set "run.run_dir=\"$WORK/$name\"" "$@" >"$WORK/$name.log" 2>&1 ||
        { echo "FAILED: resave $name"; cat "$WORK/$name.log"; exit 1; }
}

train 2 w2 --set parallel.zero_stage=2
resave 3 w2 w2_to_3 --set parallel.zero_stage=2
same w2 w2_to_3
train 4 w4 --set parallel.zero_stage=1
resave 2 w4 w4_to_2 --set parallel.zero_stage=1
same w4 w4_to_2
train 2 z3 --set parallel.zero_stage=3
resave 2 z3 z3_to_z1 --set parallel.zero_stage=1
same z3 z3_to_z1
train 4 sub --set parallel.zero_stage=2 --set parallel.zero_group_size=2
resave 4 sub sub_to_z2 --set parallel.zero_stage=2
same sub sub_to_z2
train 3 z1_3 --set parallel.zero_stage=1
resave 1 z1_3 z1_3_to_1
same z1_3 z1_3_to_1
L4=(--set model.n_layer=4 --set training.grad_accum_steps=2)
train 2 pp2 "${L4[@]}" --set parallel.pp=2
resave 1 pp2 pp2_to_1 "${L4[@]}"
same pp2 pp2_to_1
train 1 one4 "${L4[@]}"
resave 4 one4 one4_to_pp4 "${L4[@]}" --set parallel.pp=4
same one4 one4_to_pp4
train 4 pp2dp2 "${L4[@]}" --set parallel.pp=2 --set parallel.zero_stage=1
resave 4 pp2dp2 pp2dp2_to_pp4 "${L4[@]}" --set parallel.pp=4
same pp2dp2 pp2dp2_to_pp4

E=(--set run.eval_interval=0 --set checkpoint.interval=3)  # val reads eval_steps micro-batches per rank: dp-dependent
Z3=(--set parallel.zero_stage=3 --set parallel.zero_group_size=2)
run 1 stream1 "${E[@]}" --set training.grad_accum_steps=4
run 4 stream4 "${E[@]}" "${Z3[@]}"
CK=(--set "checkpoint.resume=\"$WORK/stream4/checkpoints/step_3\"")
run 4 stream4_to_4 "${E[@]}" "${Z3[@]}" "${CK[@]}"
compare stream4 stream4_to_4 0 3
run 1 stream4_to_1 "${E[@]}" "${CK[@]}" --set training.grad_accum_steps=4
compare stream1 stream4_to_1 1e-6 3
run 1 stream4_to_1_b4 "${E[@]}" "${CK[@]}" --set training.micro_batch_size=4 --set training.grad_accum_steps=2
compare stream1 stream4_to_1_b4 1e-6 3
run 2 stream4_to_2 "${E[@]}" "${CK[@]}" --set parallel.zero_stage=1 --set training.grad_accum_steps=2
compare stream1 stream4_to_2 1e-6 3
run 2 stream4_to_pp2 "${E[@]}" "${CK[@]}" --set parallel.pp=2 --set training.grad_accum_steps=4
compare stream1 stream4_to_pp2 1e-6 3
# The 1-rank step-3 checkpoint as an older llmtrain wrote it: [loader] epoch 0, batch 12 (3 steps of
# 4 micro-batches), state.toml resealed. Same layout: bitwise; micro_batch_size 4 x 2: refused.
OLD="$WORK/stream1_old/checkpoints/step_3"
mkdir -p "$(dirname "$OLD")" && cp -r "$WORK/stream1/checkpoints/step_3" "$OLD"
"$PY" - "$OLD/state.toml" <<'PY'
import hashlib, sys
text = open(sys.argv[1]).read()
body = text[:text.index('\n[integrity]\n') + 1]
now = '[loader]\nsample = 24\nseed = 1337\n'
assert body.count(now) == 1, f'{sys.argv[1]}: no {now!r}'
body = body.replace(now, '[loader]\nbatch = 12\nepoch = 0\n')
open(sys.argv[1], 'w').write(body + '[integrity]\nstate_sha256 = "' + hashlib.sha256(body.encode()).hexdigest() + '"\n')
PY
run 1 stream1_old_to_1 "${E[@]}" --set training.grad_accum_steps=4 --set "checkpoint.resume=\"$OLD\""
compare stream1 stream1_old_to_1 0 3
if (run 1 stream1_old_to_b4 "${E[@]}" --set training.micro_batch_size=4 --set training.grad_accum_steps=2 \
    --set "checkpoint.resume=\"$OLD\"") >/dev/null; then
    echo "FAILED: an older checkpoint resumed at another micro_batch_size"; exit 1
fi
grep -q "state.toml: \[loader\] epoch 0, batch 12 .* at dp 1, step 3) does not fit dp 1, micro_batch_size 4" \
    "$WORK/stream1_old_to_b4.log" || { echo "FAILED: no clear error"; cat "$WORK/stream1_old_to_b4.log"; exit 1; }
echo "zero_reshard: all reshardings load what was saved; the data stream goes on alike in every layout"
