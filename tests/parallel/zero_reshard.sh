#!/usr/bin/env bash
# tests/parallel/zero_reshard.sh — a checkpoint written under one world size / ZeRO stage / group
# layout loads under another, and every loaded value equals the saved one: the resaved checkpoint's
# weights (model.h5) and AdamW moments (optim_*.h5 pieces reassembled by tensor and offset) are
# compared bitwise with the original's. Cases (the issue's): 2 -> 3 ranks, 4 -> 2, ZeRO-3 -> ZeRO-1,
# sub-DP 2x2 ZeRO-2 -> plain ZeRO-2 on 4, and ZeRO-1 on 3 -> one process at stage 0; and across
# pipelines (4 layers): pp 2 -> one process, one process -> pp 4, pp 2 x dp 2 ZeRO-1 -> pp 4.
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
same() {  # same <a> <b>: every tensor and every optimizer element bitwise equal
    "$PY" - "$WORK/$1/checkpoints/step_3" "$WORK/$2/checkpoints/step_3" <<'PY'
import sys, glob, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
ma, mb = h5py.File(a + '/model.h5', 'r'), h5py.File(b + '/model.h5', 'r')
assert sorted(ma) == sorted(mb)
for k in ma:
    assert np.array_equal(ma[k][()], mb[k][()]), f'{b}: weights of {k} differ'
def moments(d):  # tensor -> (m, v) reassembled from every shard file by offset
    out = {}
    for f in sorted(glob.glob(d + '/optim_*.h5')):
        h = h5py.File(f, 'r')
        for k in h['m']:
            n = ma[k].size
            m, v = out.setdefault(k, (np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)))
            o = int(h['m'][k].attrs['offset']); p = h['m'][k][()]
            m[o:o + p.size] = p; v[o:o + p.size] = h['v'][k][()]
    return out
oa, ob = moments(a), moments(b)
assert sorted(oa) == sorted(ma) and sorted(ob) == sorted(ma), 'a tensor is missing from the optimizer shards'
for k in oa:
    for x, y, what in ((oa[k][0], ob[k][0], 'm'), (oa[k][1], ob[k][1], 'v')):
        assert not np.isnan(x).any() and not np.isnan(y).any(), f'{k}: {what} not fully covered'
        assert np.array_equal(x, y), f'{b}: {what} of {k} differs'
print(f'{b}: {len(ma)} tensors and their m, v equal to {a}')
PY
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
echo "zero_reshard: all reshardings load what was saved"
